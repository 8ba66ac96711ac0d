"""Which positional encoding, and does it generalise to longer sequences? (NTHU slides 21-30)

Sinusoidal vs learned vs rotary (RoFormer) vs ALiBi vs none vs the raw index 1, 2, 3, ... that
the lecture uses as a counter-example ("trained up to 50, tested on 53"). Trained on reverse with
lengths 1-16, tested on 1-16 (test) and 17-24 (test_long). Without any positional signal,
reversal is impossible; learned positions beyond 16 were never trained.

Factorial: encoding x test length. Length is not trained: its levels are the two test splits of
the same runs, so "rotary generalises to longer inputs" is the encoding x length interaction,
(rotary - sinusoidal at lengths 17-24) - (rotary - sinusoidal at 1-16), paired by seed.
"""

from transformer_jax.sweep import Factor, SplitFactor, Sweep

ENCODING = Factor(
    "encoding",
    {
        name: {"model.positional.kind": name}
        for name in ("sinusoidal", "learned", "rotary", "alibi", "none", "index")
    },
)
LENGTH = SplitFactor("length", {"seen_1-16": "test", "unseen_17-24": "test_long"})


def get_sweep():
    return Sweep(
        config="configs/ablation.py",
        config_arg="reverse",
        factors=(ENCODING, LENGTH),
        seeds=(0, 1, 2),
        metrics=(
            "test/seq_accuracy",
            "test_long/token_accuracy",
            "test_long/seq_accuracy",
            "test/loss",
        ),
    )
