"""Copy, reverse and sort: the algorithmic seq2seq tasks of the Universal Transformer paper (§3.1).

A small encoder-decoder on sequences of 1-20 symbols; test_long holds 21-40. The argument picks
the task, `:copy` (default), `:reverse` or `:sort`, optionally followed by `,quick` for a
one-minute smoke run. Runs in minutes on a laptop CPU:

  python -m transformer_jax.main --config=configs/algorithmic.py:reverse --workdir=runs/reverse
"""

from transformer_jax import defaults

TASKS = ("copy", "reverse", "sort")


def get_config(arg: str | None = None):
    task, quick = defaults.parse_arg(arg, TASKS, default="copy")
    config = defaults.base_config(task)
    config.model.update(d_model=128, dropout_rate=0.0)
    config.model.attention.num_heads = 4
    config.model.ffn.d_ff = 256
    config.model.positional.max_len = 48  # room for test_long (up to 40 symbols + EOS)
    config.train.update(steps=1500, learning_rate=1e-3, warmup_steps=100)
    return defaults.shrink(config) if quick else config
