"""Universal Transformer vs Transformer on copy: longer inputs?

Dehghani et al. (2019, Table 4) train algorithmic tasks on length 40 and test on length 400:
char accuracy / sequence accuracy, Transformer vs UT, copy 0.53/0.03 vs 0.91/0.35, reverse
0.13/0.06 vs 0.96/0.46, addition 0.07/0.00 vs 0.34/0.02. Here, at laptop scale
(configs/ablation.py: d_model=64, 500 steps), test holds the training lengths and test_long
longer ones. Variants: the 2+2-layer Transformer; a UT with the same depth (2 steps, one shared
block per stack, so about half the parameters); a UT with 4 fixed steps; UT + ACT with at most 4
steps (Graves 2016 halting, eps=0.01, halting bias -1, ponder cost tau=0.01). ponder_mean is the
mean number of steps per real position (ACT only).
"""

import runpy
from pathlib import Path


def get_sweep():
    # The variants and metrics are those of experiments/universal.py; only the task differs.
    return runpy.run_path(str(Path(__file__).with_name("universal.py")))["make_sweep"]("copy")
