"""One head or several at a fixed d_model? (Vaswani Table 3 rows A; NTHU slides 32-36)

The paper: 1 head (d_k=512) is 0.9 BLEU worse than 8 heads, and too many heads (d_k=16) also
hurt. Here d_model=64 on the sort task, 1, 2, 4, 8 and 16 heads (d_k = 64 ... 4).
"""

from transformer_jax.sweep import Sweep


def get_sweep():
    return Sweep(
        config="configs/ablation.py",
        config_arg="sort",
        variants={f"heads_{h}": {"model.attention.num_heads": h} for h in (4, 1, 2, 8, 16)},
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy", "test/loss", "test_long/token_accuracy"),
        baseline="heads_4",
    )
