"""Sort: the decoder writes the input symbols in ascending order (UT paper, §3.1).

A small encoder-decoder on sequences of 1-20 symbols; test_long holds 21-40. Runs in minutes on
a laptop CPU:  python -m transformer_jax.main --config=configs/copy.py --workdir=runs/sort
Add `:quick` to the config path for a one-minute smoke run.
"""

from transformer_jax import defaults


def get_config(arg: str | None = None):
    config = defaults.base_config("sort")
    config.model.update(d_model=128, num_heads=4, d_ff=256, dropout_rate=0.0)
    config.model.max_len = 48  # room for test_long (up to 40 symbols + EOS)
    config.train.update(steps=1500, learning_rate=1e-3, warmup_steps=100)
    return defaults.apply_arg(config, arg)
