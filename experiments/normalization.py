"""Normalization: LayerNorm vs RMSNorm vs DyT vs BatchNorm vs none, post- vs pre-norm, warmup.

Claims tested: RMSNorm matches LayerNorm (Zhang & Sennrich 2019); DyT replaces norms (Zhu et al.
2025); BatchNorm suits variable-length text poorly (NTHU slide 39); post-norm needs learning-rate
warmup while pre-norm does not (Xiong et al. 2020); residual connections make training work
(NCCU slides 52-56). Copy task, 4+4 layers so that depth matters, peak learning rate 2e-3.
"""

from transformer_jax.sweeps import Sweep

DEEP = {"model.num_encoder_layers": 4, "model.num_decoder_layers": 4}
PRE = {"model.norm_position": "pre"}
NO_WARMUP = {"train.warmup_steps": 0}


def get_sweep():
    return Sweep(
        config="configs/ablation.py",
        config_arg="copy",
        variants={
            "post_layernorm": {**DEEP},
            "post_layernorm_no_warmup": {**DEEP, **NO_WARMUP},
            "pre_layernorm": {**DEEP, **PRE},
            "pre_layernorm_no_warmup": {**DEEP, **PRE, **NO_WARMUP},
            "post_rmsnorm": {**DEEP, "model.norm": "rmsnorm"},
            "pre_dyt": {**DEEP, **PRE, "model.norm": "dyt"},
            "post_batchnorm": {**DEEP, "model.norm": "batchnorm"},
            "pre_none": {**DEEP, **PRE, "model.norm": "none"},
            "post_layernorm_no_residual": {**DEEP, "model.residual": False},
        },
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy", "test/loss", "test_long/token_accuracy"),
        baseline="post_layernorm",
    )
