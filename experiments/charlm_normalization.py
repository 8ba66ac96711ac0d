"""Normalization of a character language model, each cell at its own learning rate and warmup.

The normalization claims of experiments/normalization_tuned.py, rerun on tiny shakespeare
characters (configs/shakespeare_char.py, pre-LayerNorm as the reference, 1,000 steps) where the
variants are not at a ceiling: post- vs pre-LayerNorm (Xiong et al. 2020: post-norm needs
warmup, more so in deeper stacks), RMSNorm (Zhang & Sennrich 2019), DyT (Zhu et al. 2025), no
norm, and no residual connections (NCCU slides 52-56), each at 2 and 6 layers. Warmup (0 or 100
steps) is nuisance: "post-norm needs warmup" is read from each cell's best at each warmup (the
report's table per warmup value). Tuned and judged as experiments/charlm_attention_scale.py.

Budget (2 CPU cores; the measurement is in experiments/charlm_attention_scale.py): a run of
the base config takes ~45 s at 2 layers and ~140 s at 6 (3.1x, measured under the same load).
6 cells x 2 depths x (3 rates x 2 warmups x 3 seeds + 3 confirmation seeds) = 126 runs x 45 s
+ 126 runs x 140 s = 5,670 + 17,640 = 23,310 s = 6.5 h, the largest of the three sweeps (the
6-layer cells are 3/4 of it).
"""

import runpy
from pathlib import Path

from transformer_jax.sweep import Factor

POSITION = Factor("position", {"pre": {}, "post": {"model.norm.position": "post"}})
NORM = Factor(
    "norm",
    {
        kind: {} if kind == "layernorm" else {"model.norm.kind": kind}
        for kind in ("layernorm", "rmsnorm", "dyt", "none")
    },
)
RESIDUAL = runpy.run_path(str(Path(__file__).with_name("normalization.py")))["RESIDUAL"]
DEPTH = Factor(
    "depth",
    {"2_layers": {}, "6_layers": {"model.num_decoder_layers": 6}},
    reference_in_name=False,
)


def get_sweep():
    protocol = runpy.run_path(str(Path(__file__).with_name("charlm_attention_scale.py")))
    cells = [
        {**cell, "depth": depth}
        for depth in ("2_layers", "6_layers")
        for cell in (
            {},  # pre_layernorm, the reference
            {"position": "post"},
            {"norm": "rmsnorm"},
            {"norm": "dyt"},
            {"norm": "none"},
            {"residual": "no_residual"},
        )
    ]
    return protocol["charlm_sweep"]((POSITION, NORM, RESIDUAL, DEPTH), cells)
