"""Normalization of a character language model at 2 and 6 layers, decided by seeds until decided.

The cells of experiments/charlm_normalization.py (pre- and post-LayerNorm, RMSNorm, DyT, no
norm, no residual; 2 and 6 layers) under the protocol of
experiments/charlm_decided_attention_scale.py; "post-norm needs warmup" is read from each cell's
best at each warmup value (0, 100, 400) in the report.

Cost: 6 cells x ~32 runs x 136 s (2 layers) + 6 x ~32 x 410 s (6 layers) = 7.3 + 21.9 h: over
the 20 run-hour budget by itself. Shrink first: `--variants` with the 2-layer cells and the
6-layer pre, post and no-norm cells (the claims' cells) is 7.3 + 10.9 = 18 h.
"""

import runpy
from pathlib import Path


def get_sweep():
    here = Path(__file__).parent
    protocol = runpy.run_path(str(here / "charlm_decided_attention_scale.py"))
    norm = runpy.run_path(str(here / "charlm_normalization.py"))
    cells = [
        {**cell, "depth": depth}
        for depth in ("2_layers", "6_layers")
        for cell in (
            {},
            {"position": "post"},
            {"norm": "rmsnorm"},
            {"norm": "dyt"},
            {"norm": "none"},
            {"residual": "no_residual"},
        )
    ]
    factors = (norm["POSITION"], norm["NORM"], norm["RESIDUAL"], norm["DEPTH"])
    return protocol["decided_sweep"](factors, cells)
