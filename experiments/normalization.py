"""Normalization: LayerNorm vs RMSNorm vs DyT vs BatchNorm vs none, post- vs pre-norm, warmup.

Claims tested: RMSNorm matches LayerNorm (Zhang & Sennrich 2019); DyT replaces norms (Zhu et al.
2025); BatchNorm suits variable-length text poorly (NTHU slide 39); post-norm needs learning-rate
warmup while pre-norm does not (Xiong et al. 2020); residual connections make training work
(NCCU slides 52-56). Reverse task, the 2+2-layer ablation model, peak learning rate 2e-3.
"""

from transformer_jax.sweep import Sweep

PRE = {"model.norm.position": "pre"}
NO_WARMUP = {"train.warmup_steps": 0}


def get_sweep():
    return Sweep(
        config="configs/ablation.py",
        config_arg="reverse",
        variants={
            "post_layernorm": {},
            "post_layernorm_no_warmup": {**NO_WARMUP},
            "pre_layernorm": {**PRE},
            "pre_layernorm_no_warmup": {**PRE, **NO_WARMUP},
            "post_rmsnorm": {"model.norm.kind": "rmsnorm"},
            "pre_dyt": {**PRE, "model.norm.kind": "dyt"},
            "post_batchnorm": {"model.norm.kind": "batchnorm"},
            "pre_none": {**PRE, "model.norm.kind": "none"},
            "post_layernorm_no_residual": {"model.norm.residual": False},
        },
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy", "test/loss", "test_long/token_accuracy"),
        baseline="post_layernorm",
    )
