"""Does removing 1/sqrt(d_k) hurt, and how much? (Vaswani §3.2.1; NCCU slides 31-33)

The paper: q.k has variance d_k for unit-variance q, k, which pushes softmax into saturation
with tiny gradients. The NCCU slides: any suitably large constant works (sqrt(9487)), and the
temperature can be learned. Reverse task, d_model=64 with 4 heads (d_k=16) and 1 head (d_k=64).

Factorial: scale x head size. "Removing 1/sqrt(d_k) hurts more at larger d_k" is the
interaction of the two, (none - sqrt_dk at d_k=64) - (none - sqrt_dk at d_k=16), paired by seed.
The constant and learned temperatures are trained at d_k=16 only.
"""

import math

from transformer_jax.sweep import Factor, Sweep

# d_k = d_model / heads; the d_k=16 level keeps its name out of the variant names ("none").
D_K = Factor(
    "d_k",
    {"dk16": {}, "dk64": {"model.attention.num_heads": 1}},
    reference_in_name=False,
)
SCALE = Factor(
    "scale",
    {
        "sqrt_dk": {},
        "none": {"model.attention.scale": "none"},
        "constant_9487": {
            "model.attention.scale": "constant",
            "model.attention.temperature": math.sqrt(9487),
        },
        "learned": {"model.attention.scale": "learned"},
    },
)


def get_sweep():
    return Sweep(
        config="configs/ablation.py",
        config_arg="reverse",
        factors=(D_K, SCALE),
        cells=[
            {},  # sqrt_dk, the reference cell
            {"scale": "none"},
            {"scale": "constant_9487"},
            {"scale": "learned"},
            {"d_k": "dk64"},  # dk64_sqrt_dk
            {"d_k": "dk64", "scale": "none"},  # dk64_none
        ],
        seeds=(0, 1, 2),
        metrics=(
            "test/seq_accuracy",
            "test/loss",
            "test_long/token_accuracy",
            "test/attention_max_prob/encoder/layer_0/self_attention",
        ),
    )
