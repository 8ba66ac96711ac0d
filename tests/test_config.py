"""Bad configs fail at construction with a message naming the field, the value and the fix."""

import pytest

from transformer_jax.config import ModelConfig


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"d_model": 30, "num_heads": 4}, "model.d_model=30"),
        ({"num_kv_heads": 3}, "model.num_kv_heads=3"),
        ({"positional": "rotary", "d_model": 12, "num_heads": 4}, "head dimension"),
        ({"positional": "fourier"}, "model.positional='fourier'"),
        ({"norm": "groupnorm"}, "'layernorm'"),
        ({"attention_scale": "sqrt"}, "model.attention_scale='sqrt'"),
        ({"attention_impl": "flash"}, "model.attention_impl"),
        ({"activation": "tanh"}, "model.activation"),
        ({"norm_position": "middle"}, "model.norm_position"),
        ({"sliding_window": -1}, "model.sliding_window=-1"),
        ({"num_global_tokens": 2}, "model.num_global_tokens=2"),
        ({"dropout_rate": 1.0}, "model.dropout_rate"),
        ({"attention_scale": "constant", "attention_temperature": 0.0}, "attention_temperature"),
        ({"family": "encoder_classifier", "num_classes": 0}, "model.num_classes=0"),
        ({"family": "encoder_decoder", "num_encoder_layers": 0}, "num_encoder_layers"),
        ({"vocab_size": 0}, "model.vocab_size=0"),
    ],
)
def test_invalid_configs_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ModelConfig(**changes)


def test_unknown_field_lists_valid_fields():
    with pytest.raises(ValueError, match="unknown model config field.*'n_heads'"):
        ModelConfig.from_dict({"n_heads": 4})


def test_valid_config_round_trips():
    cfg = ModelConfig.from_dict({"d_model": 64, "num_heads": 8, "num_kv_heads": 2})
    assert cfg.head_dim == 8 and cfg.kv_heads == 2
