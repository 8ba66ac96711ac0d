"""Normalization: LayerNorm vs RMSNorm vs DyT vs BatchNorm vs none, post- vs pre-norm, warmup.

Claims tested: RMSNorm matches LayerNorm (Zhang & Sennrich 2019); DyT replaces norms (Zhu et al.
2025); BatchNorm suits variable-length text poorly (NTHU slide 39); post-norm needs learning-rate
warmup while pre-norm does not (Xiong et al. 2020); residual connections make training work
(NCCU slides 52-56). Reverse task, the 2+2-layer ablation model, peak learning rate 2e-3.

Factorial: position x norm x warmup x residual x depth, a listed subset of the grid. Each norm
is compared with LayerNorm at its own position (DyT and no norm are pre-norm, so against
pre-norm LayerNorm). "Post-norm needs warmup, pre-norm does not" is the position x warmup
interaction; Xiong et al. see it in deeper stacks, so the same 2x2 is also listed at 6+6 layers
(train only those cells with --variants=post_layernorm_6_layers,...; see the report).
"""

from transformer_jax.sweep import Factor, Sweep

POSITION = Factor("position", {"post": {}, "pre": {"model.norm.position": "pre"}})
NORM = Factor(
    "norm",
    {
        kind: {} if kind == "layernorm" else {"model.norm.kind": kind}
        for kind in ("layernorm", "rmsnorm", "dyt", "batchnorm", "none")
    },
)
# Reference levels that keep their names out of the variant names ("post_layernorm").
WARMUP = Factor(
    "warmup",
    {"50_steps": {}, "no_warmup": {"train.warmup_steps": 0}},
    reference_in_name=False,
)
RESIDUAL = Factor(
    "residual",
    {"with": {}, "no_residual": {"model.norm.residual": False}},
    reference_in_name=False,
)
DEPTH = Factor(
    "depth",
    {
        "2_layers": {},
        "6_layers": {"model.num_encoder_layers": 6, "model.num_decoder_layers": 6},
    },
    reference_in_name=False,
)


def get_sweep():
    position_x_warmup = [
        {"position": p, "warmup": w} for p in ("post", "pre") for w in ("50_steps", "no_warmup")
    ]
    return Sweep(
        config="configs/ablation.py",
        config_arg="reverse",
        factors=(POSITION, NORM, WARMUP, RESIDUAL, DEPTH),
        cells=[
            *position_x_warmup,  # post_layernorm (reference) ... pre_layernorm_no_warmup
            {"norm": "rmsnorm"},
            {"position": "pre", "norm": "dyt"},
            {"norm": "batchnorm"},
            {"position": "pre", "norm": "none"},
            {"residual": "no_residual"},
            *({**cell, "depth": "6_layers"} for cell in position_x_warmup),
        ],
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy", "test/loss", "test_long/token_accuracy"),
    )
