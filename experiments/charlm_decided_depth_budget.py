"""Do the 6-layer normalization verdicts hold at 3x the steps?

The 6-layer cells of experiments/charlm_decided_normalization.py whose verdicts the claims
cite (pre-LayerNorm, the reference; post-LayerNorm; no norm) trained for 3,000 steps instead of
1,000, each tuned again at that budget (the same learning rates, the warmup axis scaled with
the budget: 0, 300, 1,200) and confirmed in rounds under the protocol of
experiments/charlm_decided_attention_scale.py. At 1,000 steps the cosine schedule anneals to 0
while validation loss still falls 0.003-0.013 nats over the last 100 steps, so a verdict there
may be one of the budget: each 6-layer verdict is either confirmed here or reported as
depending on the budget.

The cells keep the names of the 1,000-step sweep's 6-layer cells; their level `6_layers` here
also sets train.steps=3000.

Cost (2 CPU cores, seed groups: a 6-layer run of 1,000 steps takes ~410 s, so ~1,230 s at
3,000): 3 cells x (3 rates x 3 warmups x 2 selection seeds + ~4 for extensions + ~10
confirmation seeds) = ~96 runs x 1,230 s = ~33 h, beyond what 2 cores do in the verdicts'
20 run-hour budget; it is meant for an accelerator (one seed group of this model on a GPU is
seconds per 1,000 steps) or for several sessions resuming from the committed record.
"""

import runpy
from pathlib import Path

from transformer_jax.sweep import Factor

STEPS = 3000
WARMUP_STEPS = (0, 300, 1200)  # 0, 100, 400 of the 1,000-step sweeps, scaled with the budget


def get_sweep():
    here = Path(__file__).parent
    protocol = runpy.run_path(str(here / "charlm_decided_attention_scale.py"))
    norm = runpy.run_path(str(here / "charlm_normalization.py"))
    depth = Factor(
        "depth",
        {"2_layers": {}, "6_layers": {"model.num_decoder_layers": 6, "train.steps": STEPS}},
        reference_in_name=False,
    )
    cells = [
        {"depth": "6_layers"},
        {"depth": "6_layers", "position": "post"},
        {"depth": "6_layers", "norm": "none"},
    ]
    factors = (norm["POSITION"], norm["NORM"], norm["RESIDUAL"], depth)
    return protocol["decided_sweep"](
        factors, cells, warmup_steps=WARMUP_STEPS, baseline="pre_layernorm_6_layers"
    )
