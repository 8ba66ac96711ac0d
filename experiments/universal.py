"""Universal Transformer vs Transformer on reverse: longer inputs?

`make_sweep(task)` runs the same comparison on another task (universal_copy.py,
universal_addition.py); its description, below, becomes each report's claim.
"""

from transformer_jax.sweep import Sweep

DETAILS = """\
Dehghani et al. (2019, Table 4) train algorithmic tasks on length 40 and test on length 400:
char accuracy / sequence accuracy, Transformer vs UT, copy 0.53/0.03 vs 0.91/0.35, reverse
0.13/0.06 vs 0.96/0.46, addition 0.07/0.00 vs 0.34/0.02. Here, at laptop scale
(configs/ablation.py: d_model=64, 500 steps), test holds the training lengths and test_long
longer ones. Variants: the 2+2-layer Transformer; a UT with the same depth (2 steps, one shared
block per stack, so about half the parameters); a UT with 4 fixed steps; UT + ACT with at most 4
steps (Graves 2016 halting, eps=0.01, halting bias -1, ponder cost tau=0.01). ponder_mean is the
mean number of steps per real position (ACT only).
"""


def make_sweep(task: str) -> Sweep:
    """The comparison on one algorithmic task of configs/ablation.py."""
    universal = {"model.universal.enabled": True}
    title = f"Universal Transformer vs Transformer on {task}: longer inputs?"
    return Sweep(
        description=f"{title}\n\n{DETAILS.rstrip()}",
        config="configs/ablation.py",
        config_arg=task,
        variants={
            "transformer": {},
            "ut_2": {**universal, "model.universal.steps": 2},
            "ut_4": {**universal, "model.universal.steps": 4},
            "ut_act_4": {**universal, "model.universal.steps": 4, "model.universal.act": True},
        },
        seeds=(0, 1, 2),
        metrics=(
            "test_long/token_accuracy",
            "test_long/seq_accuracy",
            "test/token_accuracy",
            "test/seq_accuracy",
            "test/ponder_mean/encoder",
            "test_long/ponder_mean/encoder",
            "test_long/ponder_mean/decoder",
        ),
        baseline="transformer",
    )


def get_sweep():
    return make_sweep("reverse")
