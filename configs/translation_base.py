"""The base Transformer of Vaswani et al. (2017) on WMT14 English-German (Table 3, "base").

N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, label smoothing 0.1, Adam(0.9, 0.98, 1e-9) with
the warmup-then-inverse-square-root schedule (warmup 4000), 100K steps; shared source/target
vocabulary (joint SentencePiece) and tied embeddings. Needs the TFDS dataset
`wmt14_translate/de-en` prepared in data.data_dir and an accelerator; `:quick` shrinks it.
"""

from transformer_jax import defaults


def get_config(arg: str | None = None):
    config = defaults.base_config("wmt14_translate/de-en")
    config.data.batch_size = 128  # ~25K source+target tokens per batch, as in the paper
    config.model.attention.num_heads = 8
    config.model.ffn.d_ff = 2048
    config.model.update(
        d_model=512,
        num_encoder_layers=6,
        num_decoder_layers=6,
        dropout_rate=0.1,
        dtype="bfloat16",
    )
    config.train.update(
        steps=100_000,
        schedule="rsqrt",
        learning_rate=1.0,  # multiplier of d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
        warmup_steps=4000,
        b1=0.9,
        b2=0.98,
        eps=1e-9,
        grad_clip_norm=0.0,
        label_smoothing=0.1,
        log_every=100,
        eval_every=5000,
        eval_examples=3000,
        checkpoint_every=5000,
    )
    return defaults.apply_arg(config, arg)
