"""Universal Transformer vs Transformer on reverse at length 400 under tensor2tensor's recipe;
see experiments/universal_table4_t2t.py."""

import runpy
from pathlib import Path


def get_sweep():
    # The variants and metrics are those of universal_table4_t2t.py; only the task differs.
    path = Path(__file__).with_name("universal_table4_t2t.py")
    return runpy.run_path(str(path))["make_sweep"]("reverse")
