"""Addition as a language (NTHU HW2 "arithmetic as a language"; UT paper's algorithmic tasks).

Inputs like "123+45", targets "168"; test_long has operands with more digits than training.
Set --config.data.reverse_answer=True to write the sum least-significant digit first, the order
in which carries are computed.
"""

from transformer_jax import defaults


def get_config(arg: str | None = None):
    config = defaults.base_config("addition")
    config.model.update(d_model=128, dropout_rate=0.0)
    config.model.attention.num_heads = 4
    config.model.ffn.d_ff = 256
    config.model.positional.max_len = 24  # room for test_long: two 8-digit operands and '+'
    config.train.update(steps=3000, learning_rate=1e-3, warmup_steps=200)
    return defaults.apply_arg(config, arg)
