"""Does removing 1/sqrt(d_k) hurt a character language model, each cell at its own learning
rate and warmup? (Vaswani §3.2.1; NCCU slides 31-33)

The attention-scale claims of experiments/attention_scale_tuned.py, rerun where the variants
are not at a ceiling: tiny shakespeare, characters (configs/shakespeare_char.py, a 2-layer
decoder, d_model=64, 1,000 steps; validation loss is still falling at the end). Scale
(sqrt_dk, none, the constant sqrt(9487), learned) x head size (4 heads of d_k=16, 1 head of
d_k=64), the full 4 x 2 grid. Every cell trains at every peak learning rate and warmup of the
grid below and is compared at the setting with the lowest mean validation loss over its 3 seeds
(docs/tuning.md). Each comparison gets an equivalence verdict (different / equivalent /
inconclusive) against the margins below (report/equivalence.py).

Budget (2 CPU cores, measured with `python -m transformer_jax.main
--config=configs/shakespeare_char.py --workdir=...`, at its first rate 3e-3): one run of the
base config (2 layers, 1,000 steps) took 90 s wall, 63 s of it training, with the load average
at ~5 (other jobs on the 2 cores); the same model trained at 29 ms/step at load 1.4 (a
1,500-step run, 59 s wall),
so a 1,000-step run there takes ~45 s (10 s start and compile, 29 s training, 5 s for the ten
evaluations). Its validation loss at steps 700-1,000: 1.982, 1.953, 1.932, 1.927, still
falling. 8 cells x (3 rates x 2 warmups x 3 seeds + 3 confirmation seeds) = 168 runs x 45 s
= 7,560 s = 2.1 h. The three character-LM sweeps together: 7,560 + 4,725 (positional) + 23,310
(normalization) = 35,595 s = 9.9 h of the 10 allowed; the seed groups the sweep runner trains
by default share one start and compile among a cell's seeds, which leaves more slack.
"""

import runpy
from pathlib import Path

from transformer_jax.sweep import Sweep

CONFIG = "configs/shakespeare_char.py"
# Peak learning rates spanning 10x around the config's 6e-3 (three values: the budget's limit).
# A first grid, 1e-3 / 3e-3 / 1e-2, put sqrt_dk's choice on its upper edge (1e-2 with warmup:
# mean validation loss 1.814 against 1.917 at 3e-3, 3 seeds) while no scale did best at 3e-3
# (2.057; 2.298 at 1e-3): this grid brackets both.
LEARNING_RATES = (2e-3, 6e-3, 2e-2)
WARMUP_STEPS = (0, 100)  # none, and the config's 100 (a tenth of the run)
METRICS = (
    "test/loss",  # nats per character
    "test/mean_loss",  # the mean over the 10 evaluations: how fast it learnt
    "test/token_accuracy",
    "test/steps_to_threshold",  # first evaluation at test loss <= 2.0 (train.loss_threshold)
)
# Differences that do not matter: 0.02 nats per character is ~1% of the final loss and below
# the spread of the learning-rate grid's neighbours; half a point of next-character accuracy.
MARGINS = {"test/loss": 0.02, "test/mean_loss": 0.02, "test/token_accuracy": 0.005}

# The algorithmic sweep's factors: scale x d_k (d_k = d_model / heads = 64 / 4 or 64 / 1).
_ALGORITHMIC = runpy.run_path(str(Path(__file__).with_name("attention_scale.py")))
D_K, SCALE = _ALGORITHMIC["D_K"], _ALGORITHMIC["SCALE"]


def charlm_sweep(factors, cells=None) -> Sweep:
    """The tuned character-LM protocol every experiments/charlm_*.py sweep shares."""
    return Sweep(
        config=CONFIG,
        factors=factors,
        cells=cells,
        seeds=(0, 1, 2),
        # Each cell's chosen setting retrained on fresh seeds: every test figure comes from
        # these, the runs of `seeds` only choose (docs/tuning.md).
        confirm_seeds=(10, 11, 12),
        metrics=METRICS,
        nuisance={"train.learning_rate": LEARNING_RATES, "train.warmup_steps": WARMUP_STEPS},
        select_on="validation/loss",
        select_mode="min",
        equivalence_margins=MARGINS,
    )


def get_sweep():
    return charlm_sweep((D_K, SCALE))
