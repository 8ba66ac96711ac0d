"""The switches a pretrained model's layout needs (biases, an embedding norm, an output bias),
each against the default model's math with the part it adds or removes set by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.layers.positional import sinusoidal_table
from transformer_jax.models import build_model

IDS = jnp.array([[3, 4, 5, 6, 7, 8], [9, 10, 11, 5, 4, 0]], jnp.int32)


def init(cfg):
    inputs = (IDS, IDS) if cfg.family == "encoder_decoder" else (IDS,)
    model = build_model(cfg)
    params = model.init(jax.random.PRNGKey(0), *inputs)["params"]
    return params, lambda p: model.apply({"params": p}, *inputs)


def flat(params) -> dict:
    """{"decoder/layer_0/ffn/wi/bias": leaf, ...}"""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"/".join(k.key for k in path): leaf for path, leaf in leaves}


def paths(params) -> set[str]:
    return set(flat(params))


def noised(params, scale=0.1):
    """Every parameter moved by Gaussian noise, so that biases initialised to zero are not."""
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    moved = [x + scale * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)]
    return jax.tree_util.tree_unflatten(tree, moved)


def path_map(fn, params):
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: fn("/".join(k.key for k in path), leaf), params
    )


@pytest.mark.parametrize("family", ["decoder_only", "encoder_decoder"])
def test_bias_free_dense_layers_are_the_default_model_with_zero_biases(family):
    """attention.use_bias / ffn.use_bias = False (Llama): the parameters are the default
    model's less the dense biases, and the outputs the default model's with those zeroed."""
    changes = {"attention.use_bias": False, "ffn.use_bias": False, "ffn.activation": "silu"}
    with_bias, apply_with = init(tiny_model(family, {"ffn.activation": "silu"}))
    without, apply_without = init(tiny_model(family, changes))
    dense = ("query", "key", "value", "out", "wi", "wo")
    removed = {p for p in paths(with_bias) if p.endswith("/bias") and p.split("/")[-2] in dense}
    assert removed and paths(without) == paths(with_bias) - removed
    with_bias = noised(with_bias)
    zero_biases = path_map(lambda p, x: jnp.zeros_like(x) if p in removed else x, with_bias)
    without = path_map(lambda p, x: flat(with_bias)[p], without)
    np.testing.assert_allclose(
        apply_without(without), apply_with(zero_biases), rtol=1e-5, atol=1e-5
    )
    assert not np.allclose(apply_with(with_bias), apply_with(zero_biases), atol=1e-3)


def test_embedding_norm_normalises_the_stack_input():
    """embeddings.norm (BART's layernorm_embedding): the norm's output is LayerNorm of the
    scaled token embeddings plus the sinusoidal table, what the first block then reads."""
    cfg = tiny_model("decoder_only", {"embeddings.norm": True}, num_decoder_layers=1)
    params, apply = init(cfg)
    assert set(params["decoder"]["embedding_norm"]["norm"]) == {"scale", "bias"}
    captured = build_model(cfg).apply(
        {"params": params}, IDS, capture_intermediates=lambda m, _: m.name == "embedding_norm"
    )[1]["intermediates"]["decoder"]["embedding_norm"]["__call__"][0]
    table = np.asarray(params["embedding"]["table"]["embedding"])
    x = table[np.asarray(IDS)] * np.sqrt(cfg.d_model) + sinusoidal_table(6, cfg.d_model)
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(captured, expected, rtol=1e-4, atol=1e-4)
    assert apply(params).shape == (2, 6, cfg.vocab_size)


@pytest.mark.parametrize("family", ["decoder_only", "encoder_decoder"])
def test_tied_output_bias_adds_one_vector_to_every_logit_row(family):
    """embeddings.output_bias='always' with tied embeddings (Marian's final_logits_bias)."""
    params, apply = init(tiny_model(family, {"embeddings.output_bias": "always"}))
    bias = params["output"]["bias"]
    assert bias.shape == (13,) and not np.any(bias)  # zeros at initialisation
    shifted = jnp.arange(13, dtype=jnp.float32) / 7.0
    moved = apply({**params, "output": {"bias": shifted}}) - apply(params)
    np.testing.assert_allclose(moved, np.broadcast_to(shifted, moved.shape), atol=1e-5)
    default, _ = init(tiny_model(family))
    assert "output" not in default  # tied, no bias: the default


def test_untied_output_without_bias():
    """tie_output=False with output_bias='never' (Llama's lm_head): a kernel and no bias."""
    params, _ = init(tiny_model("decoder_only", {"embeddings.tie_output": False}))
    assert set(params["output"]["logits"]) == {"kernel", "bias"}  # the default untied layer
    cfg = tiny_model(
        "decoder_only", {"embeddings.tie_output": False, "embeddings.output_bias": "never"}
    )
    assert set(init(cfg)[0]["output"]["logits"]) == {"kernel"}


def test_switch_values_are_validated():
    with pytest.raises(ValueError, match=r"model.embeddings.output_bias='tied' is not valid"):
        tiny_model("decoder_only", {"embeddings.output_bias": "tied"})
    with pytest.raises(ValueError, match=r"model.attention.use_bias=0 must be True or False"):
        tiny_model("decoder_only", {"attention.use_bias": 0})
    with pytest.raises(ValueError, match=r"model.embeddings.norm=True is not implemented"):
        tiny_model("decoder_only", {"embeddings.norm": True, "universal.enabled": True})
