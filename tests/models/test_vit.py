"""ViT: patches, shapes, permutation symmetry without positions, 2-D positions, configs, errors."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.config import (
    ModelConfig,
    ViTConfig,
)
from transformer_jax.defaults import from_file
from transformer_jax.layers.positional import sinusoidal_2d_table, sinusoidal_table
from transformer_jax.models import build_model
from transformer_jax.models.vit import patchify, unpatchify

TINY = tiny_model(
    "vit",
    {
        "ffn.activation": "gelu",
        "norm.position": "pre",
        "positional.kind": "learned",
        "positional.max_len": 256,
    },
    num_classes=5,
    num_encoder_layers=2,
    vit=ViTConfig(image_size=8, num_channels=3, patch_size=2),
)
VIT_PAPER = str(Path(__file__).parents[2] / "configs" / "vit_paper.py")
IMAGES = jax.random.uniform(jax.random.PRNGKey(0), (2, 8, 8, 3))


def init(cfg):
    model = build_model(cfg)
    return model, {"params": model.init(jax.random.PRNGKey(1), IMAGES)["params"]}


def test_patchify_takes_row_major_patches_and_unpatchify_inverts_it():
    images = np.arange(2 * 6 * 4 * 3, dtype=np.float32).reshape(2, 6, 4, 3)
    patches = np.asarray(patchify(images, 2))  # a 3x2 grid of 2x2 patches
    assert patches.shape == (2, 6, 2 * 2 * 3)
    for r in range(3):
        for c in range(2):
            expected = images[:, 2 * r : 2 * r + 2, 2 * c : 2 * c + 2].reshape(2, -1)
            np.testing.assert_array_equal(patches[:, r * 2 + c], expected)
    np.testing.assert_array_equal(unpatchify(patches, 2, 6, 4), images)


@pytest.mark.parametrize(
    "pooling,tokens,use_jit", [("cls", 17, False), ("cls", 17, True), ("mean", 16, True)]
)
def test_shapes_for_each_pooling(pooling, tokens, use_jit):
    cfg = TINY.replace(pooling=pooling)
    model, variables = init(cfg)
    apply = jax.jit(model.apply) if use_jit else model.apply
    logits = apply(variables, IMAGES)
    assert logits.shape == (2, 5) and logits.dtype == jnp.float32
    states = model.apply(variables, IMAGES, method=model.encode)
    assert states.shape == (2, tokens, 16)
    assert ("cls" in variables["params"]) == (pooling == "cls")
    # Zero-initialised head (big_vision): training starts from uniform predictions.
    np.testing.assert_allclose(logits, 0.0, atol=1e-6)


def permute_patches(images, perm):
    return unpatchify(patchify(images, 2)[:, perm], 2, 8, 8)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_without_positions_patch_permutation_is_equivariant_and_pooling_invariant(pooling):
    cfg = TINY.override({"positional.kind": "none", "pooling": pooling})
    model, variables = init(cfg)
    variables["params"]["head"]["kernel"] = jax.random.normal(jax.random.PRNGKey(2), (16, 5))
    perm = np.random.default_rng(0).permutation(16)
    permuted = permute_patches(IMAGES, perm)
    states = model.apply(variables, IMAGES, method=model.encode)
    states_permuted = model.apply(variables, permuted, method=model.encode)
    first = 1 if pooling == "cls" else 0  # the class token stays in front
    np.testing.assert_allclose(
        states_permuted[:, first:], states[:, first:][:, perm], rtol=1e-5, atol=1e-5
    )
    logits = model.apply(variables, IMAGES)
    np.testing.assert_allclose(model.apply(variables, permuted), logits, rtol=1e-5, atol=1e-5)
    assert float(jnp.abs(logits).max()) > 1e-3  # the check above is not trivially 0 == 0


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rotary", "alibi"])
def test_positions_make_the_model_see_patch_order(positional):
    cfg = TINY.override({"positional.kind": positional, "pooling": "mean"})
    model, variables = init(cfg)
    variables["params"]["head"]["kernel"] = jax.random.normal(jax.random.PRNGKey(2), (16, 5))
    permuted = permute_patches(IMAGES, np.random.default_rng(0).permutation(16))
    difference = model.apply(variables, permuted) - model.apply(variables, IMAGES)
    assert float(jnp.abs(difference).max()) > 1e-3


def test_sinusoidal_2d_table_codes_rows_then_columns():
    table = sinusoidal_2d_table(3, 4, 8).reshape(3, 4, 8)
    np.testing.assert_array_equal(table[:, 0, :4], sinusoidal_table(3, 4))
    np.testing.assert_array_equal(table[0, :, 4:], sinusoidal_table(4, 4))
    # Row features do not depend on the column, column features not on the row.
    np.testing.assert_array_equal(table[:, :, :4], np.broadcast_to(table[:, :1, :4], (3, 4, 4)))
    np.testing.assert_array_equal(table[:, :, 4:], np.broadcast_to(table[:1, :, 4:], (3, 4, 4)))
    # model.positional.base sets the wavelengths of both halves.
    based = sinusoidal_2d_table(3, 4, 8, base=100.0).reshape(3, 4, 8)
    np.testing.assert_array_equal(based[:, 0, :4], sinusoidal_table(3, 4, base=100.0))
    np.testing.assert_array_equal(based[0, :, 4:], sinusoidal_table(4, 4, base=100.0))


def test_sinusoidal_positions_have_no_parameters_and_learned_ones_do():
    _, sinusoidal = init(TINY.override({"positional.kind": "sinusoidal"}))
    _, learned = init(TINY)
    assert "position_embedding" not in sinusoidal["params"]
    assert learned["params"]["position_embedding"].shape == (17, 16)  # patches + class token


@pytest.mark.parametrize(
    "changes,message",
    [
        (
            {"vit.patch_size": 3},
            r"model\.vit\.patch_size=3 must divide model\.vit\.image_size=8.*\[1, 2, 4, 8\]",
        ),
        ({"vit.image_size": 0}, r"model\.vit\.image_size=0"),
        ({"num_classes": 1}, r"model\.num_classes=1"),
        (
            {"positional.kind": "sinusoidal", "d_model": 15, "attention.num_heads": 3},
            r"model\.d_model=15",
        ),
        ({"vit": None}, r"model\.vit=None must be set exactly when model\.family='vit'"),
    ],
)
def test_bad_configs_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        TINY.override(changes)


def test_images_of_the_wrong_shape_are_rejected():
    model = build_model(TINY)
    with pytest.raises(ValueError, match=r"\(2, 8, 8, 1\).*model\.vit\.image_size"):
        model.init(jax.random.PRNGKey(0), jnp.zeros((2, 8, 8, 1)))


@pytest.mark.parametrize(
    "arg,shape",
    [("ti16", (192, 3, 768)), ("s16", (384, 6, 1536)), ("b16", (768, 12, 3072)), (None, None)],
)
def test_vit_paper_shapes(arg, shape):
    config = from_file(VIT_PAPER, arg)
    m = config.model
    assert (m.d_model, m.attention.num_heads, m.ffn.d_ff) == (shape or (768, 12, 3072))
    assert (m.num_encoder_layers, m.vit.patch_size, config.data.image_size) == (12, 16, 224)
    assert (m.norm.position, m.ffn.activation, m.family) == ("pre", "gelu", "vit")


@pytest.mark.parametrize("arg", ["quick", "ti16,quick"])
def test_vit_paper_quick_is_a_valid_small_model(arg):
    fields = from_file(VIT_PAPER, arg).model.to_dict()
    fields.update(vocab_size=0, num_classes=10)
    fields["positional"]["max_len"] = 17
    fields["vit"].update(image_size=32, num_channels=3)
    cfg = ModelConfig.from_dict(fields)
    assert cfg.d_model == 64 and cfg.vit.num_patches == 16


def test_vit_paper_rejects_unknown_shapes():
    with pytest.raises(ValueError, match=r"'l16'.*\['ti16', 's16', 'b16'\]"):
        from_file(VIT_PAPER, "l16")
