"""The trainer's model config for image classification: filled from the data and checked."""

import pytest

from transformer_jax import defaults
from transformer_jax.data import DatasetInfo
from transformer_jax.train.trainer import resolve_model_config

DIGITS = DatasetInfo(
    name="digits",
    kind="classification",
    vocab_size=0,
    max_input_len=0,
    max_target_len=0,
    eval_splits=("test",),
    tokenizer=None,
    num_classes=10,
    image_shape=(8, 8, 1),
)
COPY = DatasetInfo("copy", "seq2seq", 13, 20, 21, ("test",), tokenizer=None)


def vit_config(family="vit", pooling="cls", **vit):
    config = defaults.base_config("digits")
    config.model.update(family=family, pooling=pooling)
    config.model.vit.update({"patch_size": 2, **vit})
    return config


@pytest.mark.parametrize("pooling,tokens", [("cls", 17), ("mean", 16)])
def test_image_shape_classes_and_length_come_from_the_data(pooling, tokens):
    cfg = resolve_model_config(vit_config(pooling=pooling), DIGITS)
    assert (cfg.vit.image_size, cfg.vit.num_channels, cfg.num_classes) == (8, 1, 10)
    assert cfg.vit.num_patches == 16 and cfg.positional.max_len == tokens


@pytest.mark.parametrize(
    "config,info,message",
    [
        (
            vit_config(image_size=32),
            DIGITS,
            r"model.vit.image_size=32 does not match.*data.image_size",
        ),
        (vit_config(num_channels=3), DIGITS, "model.vit.num_channels=3 does not match"),
        (
            vit_config(patch_size=3),
            DIGITS,
            "model.vit.patch_size=3 must divide model.vit.image_size=8",
        ),
        (vit_config(family="encoder_classifier"), DIGITS, r"valid: \['vit'\]"),
        (vit_config(), COPY, r"model.family='vit' cannot train.*\['encoder_decoder'\]"),
    ],
)
def test_mismatches_with_the_data_name_the_field(config, info, message):
    with pytest.raises(ValueError, match=message):
        resolve_model_config(config, info)


def test_non_square_images_need_resizing():
    info = DatasetInfo("wide", "classification", 0, 0, 0, ("test",), None, 10, (8, 16, 3))
    with pytest.raises(ValueError, match="8x16 images.*data.image_size"):
        resolve_model_config(vit_config(), info)
