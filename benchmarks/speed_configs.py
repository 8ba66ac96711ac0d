"""Named models for `benchmarks/train_speed.py --config=benchmarks/speed_configs.py:NAME`.

  small       decoder-only, 4 layers, d_model 128, 4 heads, batch 32 x 128 tokens (the char LM)
  medium      6 layers, d_model 384, 6 heads, context 256, batch 8
  gpt2_small  GPT-2 small: 12 layers, d_model 768, 12 heads, context 1024, vocabulary 50,304,
              tied output layer, LayerNorm epsilon 1e-5 (transformers models/gpt2/
              configuration_gpt2.py: layer_norm_epsilon 1e-5, tie_word_embeddings True),
              bfloat16 compute, batch 16 (for a GPU or TPU). The rows of
              results/accelerators/tpu_aot.md were compiled when it was untied with epsilon
              1e-6 (38.6 M more parameters: a second 768 x 50,304 matrix).

small and medium have an untied output layer and epsilon 1e-6, GPT-2's other choices (pre-norm,
GELU, learned positions, dense biases) but neither its tied output nor its epsilon 1e-5. All
train with AdamW, a cosine schedule and global-norm clipping, as `configs/char_lm.py`; any
field can be overridden on the command line (--config.model.norm.kind=rmsnorm,
--config.batch_size=8).
"""

import ml_collections

from transformer_jax import defaults

PRESETS = {
    "small": {
        "d_model": 128,
        "attention.num_heads": 4,
        "num_decoder_layers": 4,
        "seq_len": 128,
        "batch_size": 32,
    },
    "medium": {
        "d_model": 384,
        "attention.num_heads": 6,
        "num_decoder_layers": 6,
        "seq_len": 256,
        "batch_size": 8,
    },
    "gpt2_small": dict(
        d_model=768,
        **{"attention.num_heads": 12},
        num_decoder_layers=12,
        seq_len=1024,
        batch_size=16,
        vocab_size=50304,  # GPT-2's 50,257 rounded up to a multiple of 128.
        dtype="bfloat16",
        **{"embeddings.tie_output": True, "norm.epsilon": 1e-5},
    ),
}


def get_config(arg: str | None = None):
    name = arg or "small"
    if name not in PRESETS:
        raise ValueError(f"benchmark config {name!r} is unknown; valid: {sorted(PRESETS)}")
    preset = dict(PRESETS[name])
    config = ml_collections.ConfigDict()
    config.name = name
    config.seq_len = preset.pop("seq_len")
    config.batch_size = preset.pop("batch_size")
    config.warmup_steps = 3  # untimed steps after compiling
    config.timed_steps = 20  # the step time is their median
    config.model = defaults.model_config(
        **{
            "family": "decoder_only",
            "vocab_size": preset.pop("vocab_size", 256),
            "ffn.d_ff": 4 * preset["d_model"],
            "ffn.activation": "gelu",
            "positional.max_len": config.seq_len,
            "positional.kind": "learned",
            "norm.position": "pre",
            "embeddings.tie_output": False,
            "embeddings.scale": False,
            "dropout_rate": 0.1,
            **preset,
        }
    )
    config.train = defaults.train_config()
    config.train.update(optimizer="adamw", weight_decay=0.1, warmup_steps=10, steps=1000)
    return config
