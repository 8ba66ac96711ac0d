"""Universal Transformer vs Transformer on copy: longer inputs? See experiments/universal.py."""

import runpy
from pathlib import Path


def get_sweep():
    # The variants and metrics are those of experiments/universal.py; only the task differs.
    return runpy.run_path(str(Path(__file__).with_name("universal.py")))["make_sweep"]("copy")
