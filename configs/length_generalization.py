"""Length generalisation of positional encodings: a decoder-only model reverses sequences of
1-16 symbols and is tested on 8-64.

Reverse needs positions (the first output reads the last input), and a decoder-only model is
where ALiBi's and NoPE's claims were made. The data is the default reverse task in the prompt
layout (data.layout="prompt": "x = reverse(x)", loss on the answer only), with one eval split
per test length (data.test_lengths, every sequence exactly that long). The positional table
(model.positional.max_len, from the data) covers the longest prompt, 64 + 1 + 65 tokens, so
randomized and offset training positions can reach every test position.

A 2-layer decoder with d_model=64 and 4 heads: the ablation size (configs/ablation.py), which
solves reverse at the training lengths in a few thousand steps on 2 CPU cores. Runs stop when
test (training-length) token accuracy plateaus, at most train.steps. `:quick` shrinks it.
"""

from transformer_jax import defaults

TRAIN_LENGTH = 16
TEST_LENGTHS = (8, 16, 24, 32, 48, 64)  # the experiment's x axis


def get_config(arg: str | None = None):
    _, quick = defaults.parse_arg(arg)
    config = defaults.base_config("reverse")
    config.data.update(
        layout="prompt",
        max_len=TRAIN_LENGTH,
        num_test_long=0,  # the test_lengths splits replace it
        test_lengths=TEST_LENGTHS,
        num_train=50_000,
        num_test=500,  # per split
        batch_size=64,
    )
    config.model.update(family="decoder_only", num_decoder_layers=2, d_model=64, dropout_rate=0.0)
    config.model.attention.num_heads = 4
    config.model.ffn.d_ff = 256
    config.train.update(
        steps=8_000,  # an upper bound: early stopping ends runs sooner
        learning_rate=1e-3,
        schedule="constant",  # early stopping needs a schedule that does not depend on steps
        warmup_steps=200,
        log_every=100,
        eval_every=500,
        checkpoint_every=500,
        diagnostics=False,
        early_stop_metric="test/token_accuracy",  # see configs/universal_table4.py
        early_stop_patience=3,
        early_stop_min_delta=0.001,
        early_stop_min_steps=2_000,
    )
    if quick:
        config = defaults.shrink(config)
        config.data.num_train = 2_000
    return config
