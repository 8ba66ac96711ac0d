"""Which positional encoding, and does it generalise to longer sequences? (NTHU slides 21-30)

Sinusoidal vs learned vs rotary (RoFormer) vs ALiBi vs none vs the raw index 1, 2, 3, ... that
the lecture uses as a counter-example ("trained up to 50, tested on 53"). Trained on reverse with
lengths 1-16, tested on 1-16 (test) and 17-24 (test_long). Without any positional signal,
reversal is impossible; learned positions beyond 16 were never trained.
"""

from transformer_jax.sweep import Sweep


def get_sweep():
    return Sweep(
        config="configs/ablation.py",
        config_arg="reverse",
        variants={
            name: {"model.positional.kind": name}
            for name in ("sinusoidal", "learned", "rotary", "alibi", "none", "index")
        },
        seeds=(0, 1, 2),
        metrics=(
            "test/seq_accuracy",
            "test_long/token_accuracy",
            "test_long/seq_accuracy",
            "test/loss",
        ),
        baseline="sinusoidal",
    )
