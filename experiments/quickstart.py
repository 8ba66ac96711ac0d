"""Quick start: does a small Transformer need 1/sqrt(d_k) and a positional encoding to reverse?

Reversing a sequence needs to know where each symbol sits, so removing the positional encoding
should make the task impossible (NTHU slide 21); removing the 1/sqrt(d_k) factor should make
learning slower (Vaswani §3.2.1). Tiny models, three seeds, about 3-4 minutes on 2 CPU cores.
"""

from transformer_jax.sweep import Sweep


def get_sweep():
    return Sweep(
        config="configs/ablation.py",
        config_arg="reverse,quick",
        variants={
            "baseline": {},
            "no_sqrt_dk": {"model.attention.scale": "none"},
            "no_positional": {"model.positional.kind": "none"},
        },
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy", "test/token_accuracy", "test/loss"),
        baseline="baseline",
    )
