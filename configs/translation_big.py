"""The big Transformer of Vaswani et al. (2017) on WMT14 English-German.

d_model=1024, d_ff=4096, h=16, P_drop=0.3, 300K steps; everything else as
configs/translation_base.py.
"""

from pathlib import Path

from transformer_jax import defaults


def get_config(arg: str | None = None):
    config = defaults.from_file(Path(__file__).with_name("translation_base.py"))
    config.model.update(d_model=1024, dropout_rate=0.3)
    config.model.attention.num_heads = 16
    config.model.ffn.d_ff = 4096
    config.train.steps = 300_000
    return defaults.apply_arg(config, arg)
