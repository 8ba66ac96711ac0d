"""Does removing 1/sqrt(d_k) still hurt when every variant gets its own learning rate?

experiments/attention_scale.py compares the scalings at one shared peak learning rate, 2e-3.
"Without 1/sqrt(d_k) training is unstable" may only mean "needs a smaller step": here every
cell is trained at six peak learning rates spanning 40x around 2e-3 and compared at the one
with the lowest validation loss (its mean over the 3 seeds), chosen on data.num_validation
examples drawn apart from test (docs/tuning.md). The report shows the untuned comparison at 2e-3
beside the tuned one and marks every verdict kept or changed.
Each cell's chosen setting is then trained again on the fresh seeds 10, 11 and 12, and every
test figure of the report comes from those confirmation runs: the seeds that chose do not also
judge (docs/tuning.md).
"""

import os

from transformer_jax.sweep import load_sweep

# 2e-3 is the untuned sweep's. The first grid, 1e-3 to 1e-2, put five of the six cells' choices
# on its edges (1e-2, and 1e-3 for d_k=64 without scaling): widened by one value each way.
LEARNING_RATES = (5e-4, 1e-3, 2e-3, 4e-3, 1e-2, 2e-2)

# Fresh seeds that retrain each cell's chosen setting and give every reported test figure.
CONFIRM_SEEDS = (10, 11, 12)


def get_sweep():
    base = load_sweep(os.path.join(os.path.dirname(__file__), "attention_scale.py"))
    return base.tuned(
        nuisance={"train.learning_rate": LEARNING_RATES},
        select_on="validation/loss",
        select_mode="min",
        confirm_seeds=CONFIRM_SEEDS,
    )
