"""Normalization in a pre-norm ViT on the 8x8 digits: LayerNorm vs RMSNorm vs DyT vs none.

Claim (Zhu et al. 2025, "Transformers without Normalization"): DyT, gamma * tanh(alpha x) + beta
with a learnable scalar alpha (init 0.5, the paper's value for ViT), is a drop-in replacement for
LayerNorm, matching its accuracy; fixing alpha at its initial value costs accuracy (ViT-B on
ImageNet: 82.5 -> 81.1); RMSNorm matches LayerNorm. The `none` variant removes every norm,
including the final one, which the paper reports destabilises training.
Each run is configs/vit_digits.py (about 2-3 minutes on 2 CPU cores):
  python -m transformer_jax.sweep --sweep=experiments/vit_norms.py --workdir=runs/vit_norms
"""

from transformer_jax.sweep import Sweep


def get_sweep():
    return Sweep(
        config="configs/vit_digits.py",
        variants={
            "layernorm": {"model.norm.kind": "layernorm"},
            "rmsnorm": {"model.norm.kind": "rmsnorm"},
            "dyt": {"model.norm.kind": "dyt", "model.norm.dyt_learnable_alpha": True},
            "dyt_fixed_alpha": {"model.norm.kind": "dyt", "model.norm.dyt_learnable_alpha": False},
            "none": {"model.norm.kind": "none"},
        },
        seeds=(0, 1, 2),
        metrics=("test/accuracy", "test/loss"),
        baseline="layernorm",
    )
