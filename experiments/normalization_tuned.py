"""Normalization with the learning rate and warmup tuned for every cell.

experiments/normalization.py trains every cell at one peak learning rate, 2e-3, and treats
warmup (50 steps or none) as a factor. "Post-norm needs warmup" (Xiong et al. 2020) and "DyT
replaces LayerNorm" (Zhu et al. 2025) are claims about optimisation, so here the peak learning
rate (six values spanning 40x around 2e-3) and warmup (0 or 50 steps) are nuisance: every cell,
the 6+6-layer post- and pre-norm ones included, is trained at all 12 settings and compared at
the one with the lowest mean validation loss over its 3 seeds (docs/tuning.md). A first grid of
four rates (1e-3 to 1e-2) put every 2+2-layer cell but the one without residuals on its upper
edge, so it was widened by one rate each way, as the attention-scale and positional grids were.
Whether post-norm needs warmup is then read from the warmup each cell chooses and from its
isolation plot.
Each cell's chosen setting is then trained again on the fresh seeds 10, 11 and 12, and every
test figure of the report comes from those confirmation runs: the seeds that chose do not also
judge (docs/tuning.md).
"""

import os

from transformer_jax.sweep import load_sweep

LEARNING_RATES = (5e-4, 1e-3, 2e-3, 4e-3, 1e-2, 2e-2)  # 40x; 2e-3 is the untuned sweep's
WARMUP_STEPS = (0, 50)  # none, and the untuned sweep's 50

# Fresh seeds that retrain each cell's chosen setting and give every reported test figure.
CONFIRM_SEEDS = (10, 11, 12)


def get_sweep():
    base = load_sweep(os.path.join(os.path.dirname(__file__), "normalization.py"))
    return base.tuned(
        nuisance={"train.learning_rate": LEARNING_RATES, "train.warmup_steps": WARMUP_STEPS},
        select_on="validation/loss",
        select_mode="min",
        confirm_seeds=CONFIRM_SEEDS,
        drop_factors=("warmup",),
    )
