"""Does removing 1/sqrt(d_k) hurt a character language model, decided by seeds until decided?

The claims of experiments/charlm_attention_scale.py (scale sqrt_dk, none, sqrt(9487), learned x
d_k 16 and 64; configs/shakespeare_char.py, 1,000 steps) under the decided protocol shared by
every experiments/charlm_decided_*.py sweep (`decided_sweep`): each cell tuned over the peak
learning rate and a warmup axis with an interior, its learning-rate grid extended where its
best lies on an edge with the inner neighbour clearly worse (sweep/grid_edges.py), then
confirmed in rounds of 4 seeds up to 16 until every comparison is different or equivalent within
0.02 nats of test loss at Lan-DeMets O'Brien-Fleming bounds (sweep/sequential.py), or undecided
at n = 16.

Cost (from the committed runs' summaries: a 2-layer run 136 s, a 6-layer one 410 s of wall
time in seed groups on 2 cores): per 2-layer cell 3 rates x 3 warmups x 2 selection seeds = 18
runs, about 4 more for extensions, and 4-16 confirmation seeds (about 10 expected), ~32 runs x
136 s = 1.2 h; 8 cells = 9.7 h.
"""

from transformer_jax.sweep import Sweep
from transformer_jax.sweep.nuisance import GridExtension

CONFIG = "configs/shakespeare_char.py"
LEARNING_RATES = (2e-3, 6e-3, 2e-2)
# An interior: 100, the config's; 0 and 400 on either side (a tenth and two fifths of the run).
WARMUP_STEPS = (0, 100, 400)
METRICS = ("test/loss", "test/mean_loss", "test/token_accuracy")


def decided_sweep(
    factors, cells=None, config_arg="", warmup_steps=WARMUP_STEPS, baseline=""
) -> Sweep:
    """The decided character-LM protocol of every experiments/charlm_decided_*.py sweep
    (warmup_steps: the warmup axis, scaled with a longer budget; baseline: the cell compared
    with where the reference cell is not trained)."""
    return Sweep(
        config=CONFIG,
        config_arg=config_arg,
        baseline=baseline,
        factors=factors,
        cells=cells,
        seeds=(0, 1),
        confirm_seeds=tuple(range(10, 26)),
        confirm_rounds=(4, 8, 12, 16),
        metrics=METRICS,
        nuisance={"train.learning_rate": LEARNING_RATES, "train.warmup_steps": warmup_steps},
        select_on="validation/loss",
        select_mode="min",
        # The rate axis only: warmup's upper edge extends by its own ratio (1,600 of 1,000
        # steps would never reach the peak), and 0 is no edge.
        grid_extension=GridExtension(max_rounds=2, margin=0.02, keys=("train.learning_rate",)),
        equivalence_margins={"test/loss": 0.02},
    )


def get_sweep():
    import runpy
    from pathlib import Path

    scale = runpy.run_path(str(Path(__file__).with_name("attention_scale.py")))
    return decided_sweep((scale["D_K"], scale["SCALE"]))
