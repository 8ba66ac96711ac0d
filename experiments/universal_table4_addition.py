"""Universal Transformer vs Transformer on addition at length 400 (Table 4 protocol); see
experiments/universal_table4.py."""

import runpy
from pathlib import Path


def get_sweep():
    # The variants and metrics are those of universal_table4.py; only the task differs.
    return runpy.run_path(str(Path(__file__).with_name("universal_table4.py")))["make_sweep"](
        "addition"
    )
