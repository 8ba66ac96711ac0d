"""The formulas of the block and embedding switches, checked against hand-written math.

Each test captures the outputs of a model's sub-modules (flax `capture_intermediates`) and
recomputes what the paper says the next step is from the parameters, so a wiring mistake
(norm on the wrong side of the residual, a missing scale, an untied table that is still tied)
fails here, not just "the output changes".
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.layers.attention import MultiHeadAttention
from transformer_jax.layers.embedding import TokenEmbedding
from transformer_jax.layers.feedforward import FeedForward
from transformer_jax.models import build_model
from transformer_jax.models.blocks import Block, BlockContext

ATOL = 2e-5


def layer_norm(x, params, eps):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (Ba et al. 2016)."""
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.asarray(params["scale"]) + np.asarray(
        params["bias"]
    )


def run_block(position: str, residual: bool):
    cfg = tiny_model("encoder_decoder", {"norm.position": position, "norm.residual": residual})
    x_BTD = jax.random.normal(jax.random.PRNGKey(1), (2, 5, cfg.d_model))
    context = BlockContext(
        positions_BT=jnp.broadcast_to(jnp.arange(5), (2, 5)), self_mask=None, self_bias=None
    )
    block = Block(cfg)
    params = block.init(jax.random.PRNGKey(0), x_BTD, context)["params"]
    y_BTD, state = block.apply(
        {"params": params}, x_BTD, context, capture_intermediates=True, mutable=["intermediates"]
    )
    captured = state["intermediates"]
    attention_BTD = captured["self_attention"]["__call__"][0]
    ffn_BTD = captured["ffn"]["__call__"][0]

    def attend(h_BTD):
        module = MultiHeadAttention(cfg.attention, cfg.positional, cfg.dtype)
        return module.apply(
            {"params": params["self_attention"]},
            h_BTD,
            h_BTD,
            q_pos_BT=context.positions_BT,
            k_pos_BS=context.positions_BT,
        )

    def ffn(h_BTD):
        return FeedForward(cfg.ffn).apply({"params": params["ffn"]}, h_BTD)

    def norm(name, h_BTD):
        return layer_norm(np.asarray(h_BTD), params[f"norm_{name}"]["norm"], cfg.norm.epsilon)

    return np.asarray(x_BTD), np.asarray(y_BTD), attention_BTD, ffn_BTD, attend, ffn, norm


@pytest.mark.parametrize("residual", [True, False])
def test_post_norm_block_is_norm_of_x_plus_sublayer(residual):
    """post (the paper): h = Norm(x + Attn(x)), y = Norm(h + FFN(h)); no `x +` without residual."""
    x, y, attention, ffn_out, attend, ffn, norm = run_block("post", residual)
    np.testing.assert_allclose(attention, attend(x), atol=ATOL)
    h = norm("attention", x + attention if residual else attention)
    np.testing.assert_allclose(ffn_out, ffn(h), atol=ATOL)
    expected = norm("ffn", h + ffn_out if residual else ffn_out)
    np.testing.assert_allclose(y, expected, atol=ATOL)


@pytest.mark.parametrize("residual", [True, False])
def test_pre_norm_block_adds_the_sublayer_of_the_normed_input(residual):
    """pre: h = x + Attn(Norm(x)), y = h + FFN(Norm(h)); no `x +` without residual."""
    x, y, attention, ffn_out, attend, ffn, norm = run_block("pre", residual)
    np.testing.assert_allclose(attention, attend(norm("attention", x)), atol=ATOL)
    h = x + attention if residual else np.asarray(attention)
    np.testing.assert_allclose(ffn_out, ffn(norm("ffn", h)), atol=ATOL)
    np.testing.assert_allclose(y, h + ffn_out if residual else ffn_out, atol=ATOL)


def gelu_tanh(x):
    """GELU's tanh approximation (Hendrycks & Gimpel 2016), flax's default."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu"])
def test_feed_forward_formula(activation):
    """relu/gelu: W_2 act(W_1 x + b_1) + b_2; swiglu: W_2 (silu(W_1 x) * W_3 x) (Shazeer 2020)."""
    cfg = tiny_model("decoder_only", {"ffn.activation": activation})
    x = jax.random.normal(jax.random.PRNGKey(2), (3, cfg.d_model))
    params = FeedForward(cfg.ffn).init(jax.random.PRNGKey(0), x)["params"]
    y = FeedForward(cfg.ffn).apply({"params": params}, x)

    def dense(name, h):
        return np.asarray(h) @ np.asarray(params[name]["kernel"]) + np.asarray(params[name]["bias"])

    x = np.asarray(x)
    if activation == "swiglu":
        hidden = dense("wi", x) / (1 + np.exp(-dense("wi", x))) * dense("wg", x)
    else:
        assert "wg" not in params
        hidden = {"relu": lambda h: np.maximum(h, 0), "gelu": gelu_tanh}[activation](dense("wi", x))
    np.testing.assert_allclose(y, dense("wo", hidden), atol=ATOL)


@pytest.mark.parametrize("scale", [True, False])
def test_token_embeddings_are_scaled_by_sqrt_d_model(scale):
    embedding = TokenEmbedding(vocab_size=11, d_model=16, scale=scale)
    ids = jnp.array([[3, 4, 10]])
    params = embedding.init(jax.random.PRNGKey(0), ids, method=TokenEmbedding.encode)["params"]
    x = embedding.apply({"params": params}, ids, method=TokenEmbedding.encode)
    table = np.asarray(params["table"]["embedding"])
    np.testing.assert_allclose(x, table[np.asarray(ids)] * (4.0 if scale else 1.0), atol=1e-6)


@pytest.mark.parametrize("tie", [True, False])
def test_tied_output_projection_is_the_transposed_table(tie):
    cfg = tiny_model("decoder_only", {"embeddings.tie_output": tie})
    model = build_model(cfg)
    ids = jnp.array([[1, 5, 6, 7]])
    params = model.init(jax.random.PRNGKey(0), ids)["params"]
    logits, state = model.apply(
        {"params": params}, ids, capture_intermediates=True, mutable=["intermediates"]
    )
    states = np.asarray(state["intermediates"]["decoder"]["__call__"][0])
    table = np.asarray(params["embedding"]["table"]["embedding"])
    if tie:
        assert "output" not in params
        np.testing.assert_allclose(logits, states @ table.T, atol=1e-4)
    else:
        dense = params["output"]["logits"]
        expected = states @ np.asarray(dense["kernel"]) + np.asarray(dense["bias"])
        np.testing.assert_allclose(logits, expected, atol=1e-4)


@pytest.mark.parametrize("share", [True, False])
def test_shared_source_target_embeddings_are_one_table(share):
    """With sharing, the decoder reads its tokens from the encoder's table; without, from its own
    (the loss then has no gradient in the source table's rows of target-only tokens)."""
    changes = {"embeddings.share_source_target": share, "embeddings.tie_output": False}
    model = build_model(tiny_model("encoder_decoder", changes, num_decoder_layers=1))
    source, decoder_input = jnp.array([[3, 4, 5]]), jnp.array([[1, 9, 10]])
    params = model.init(jax.random.PRNGKey(0), source, decoder_input)["params"]
    assert ("target_embedding" in params) != share

    def loss(p):
        return jnp.sum(model.apply({"params": p}, source, decoder_input) ** 2)

    grads = jax.jit(jax.grad(loss))(params)  # one compile instead of the backward op by op
    source_rows = np.asarray(grads["source_embedding"]["table"]["embedding"])[[9, 10]]
    assert (np.abs(source_rows).max() > 0) == share
    if not share:
        target_rows = np.asarray(grads["target_embedding"]["table"]["embedding"])[[9, 10]]
        assert np.abs(target_rows).max() > 0
