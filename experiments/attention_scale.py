"""Does removing 1/sqrt(d_k) hurt, and how much? (Vaswani §3.2.1; NCCU slides 31-33)

The paper: q.k has variance d_k for unit-variance q, k, which pushes softmax into saturation
with tiny gradients. The NCCU slides: any suitably large constant works (sqrt(9487)), and the
temperature can be learned. Reverse task, d_model=64 with 4 heads (d_k=16) and 1 head (d_k=64).
"""

import math

from transformer_jax.sweep import Sweep

ONE_HEAD = {"model.attention.num_heads": 1}


def get_sweep():
    return Sweep(
        config="configs/ablation.py",
        config_arg="reverse",
        variants={
            "sqrt_dk": {},
            "none": {"model.attention.scale": "none"},
            "constant_9487": {
                "model.attention.scale": "constant",
                "model.attention.temperature": math.sqrt(9487),
            },
            "learned": {"model.attention.scale": "learned"},
            "dk64_sqrt_dk": {**ONE_HEAD},
            "dk64_none": {**ONE_HEAD, "model.attention.scale": "none"},
        },
        seeds=(0, 1, 2),
        metrics=(
            "test/seq_accuracy",
            "test/loss",
            "test_long/token_accuracy",
            "test/attention_max_prob/encoder/layer_0/self_attention",
        ),
        baseline="sqrt_dk",
    )
