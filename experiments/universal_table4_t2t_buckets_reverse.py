"""Table 4's Transformer and UT+ACT on reverse under tensor2tensor's recipe with its length
buckets and halting unit; see experiments/universal_table4_t2t_buckets.py."""

import runpy
from pathlib import Path


def get_sweep():
    # The variants and metrics are those of universal_table4_t2t_buckets.py; only the task differs.
    path = Path(__file__).with_name("universal_table4_t2t_buckets.py")
    return runpy.run_path(str(path))["make_sweep"]("reverse")
