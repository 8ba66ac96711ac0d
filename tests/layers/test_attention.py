"""Attention against NumPy reference math and the lectures' worked numbers."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.config import AttentionConfig, ModelConfig, PositionalConfig
from transformer_jax.layers import attention, masks


def numpy_attention(q, k, v, scale, mask=None):
    """softmax(Q K^T * scale) V per batch and head, written with NumPy loops' worth of clarity."""
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    logits = logits - logits.max(-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", weights, v)


def random_qkv(seed=0, batch=2, q_len=5, k_len=7, heads=4, kv_heads=4, head_dim=8):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(batch, q_len, heads, head_dim)).astype(np.float32)
    k = rng.normal(size=(batch, k_len, kv_heads, head_dim)).astype(np.float32)
    v = rng.normal(size=(batch, k_len, kv_heads, head_dim)).astype(np.float32)
    return q, k, v


def test_slide_softmax_numbers():
    """NCCU slides 31-33: the temperature sqrt(5) flattens a winner-take-all softmax."""
    scores = jnp.array([[[[3.9, 3.2, 1.0, 0.3, 1.1]]]])
    plain = attention.attention_weights(scores)[0, 0, 0]
    tempered = attention.attention_weights(scores / math.sqrt(5))[0, 0, 0]
    np.testing.assert_allclose(np.round(plain, 2), [0.61, 0.30, 0.03, 0.02, 0.04], atol=1e-6)
    np.testing.assert_allclose(np.round(tempered, 2), [0.40, 0.29, 0.11, 0.08, 0.11], atol=1e-6)


@pytest.mark.parametrize("impl", ["einsum", "jax"])
@pytest.mark.parametrize("use_jit", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
def test_matches_numpy_reference(impl, use_jit, with_mask):
    q, k, v = random_qkv()
    mask = None
    if with_mask:
        valid = np.array([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]], bool)
        mask = np.asarray(masks.padding_mask(jnp.asarray(valid)))
    fn = lambda q, k, v, m: attention.dot_product_attention(q, k, v, mask=m, impl=impl)  # noqa: E731
    fn = jax.jit(fn) if use_jit else fn
    expected = numpy_attention(q, k, v, 1 / math.sqrt(8), mask)
    np.testing.assert_allclose(fn(q, k, v, mask), expected, rtol=1e-5, atol=1e-5)


def test_einsum_and_jax_agree_with_causal_mask_bias_and_gqa():
    q, k, v = random_qkv(q_len=6, k_len=6, heads=4, kv_heads=2)
    pos = jnp.broadcast_to(jnp.arange(6), (2, 6))
    mask = masks.causal_mask(pos, pos)
    bias = jax.random.normal(jax.random.PRNGKey(1), (1, 4, 6, 6))
    outputs = [
        attention.dot_product_attention(q, k, v, mask=mask, bias=bias, scale=0.3, impl=impl)
        for impl in ("einsum", "jax")
    ]
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


def test_grouped_query_equals_repeated_kv_heads():
    """GQA with K kv heads equals full multi-head attention with each kv head repeated N/K."""
    q, k, v = random_qkv(heads=4, kv_heads=2)
    grouped = attention.dot_product_attention(q, k, v, impl="einsum")
    repeated = numpy_attention(
        q, np.repeat(k, 2, axis=2), np.repeat(v, 2, axis=2), 1 / math.sqrt(8)
    )
    np.testing.assert_allclose(grouped, repeated, rtol=1e-5, atol=1e-5)


def test_per_head_scale_jax_matches_einsum():
    q, k, v = random_qkv()
    scale = jnp.array([0.1, 0.5, 1.0, 2.0])
    outputs = [
        attention.dot_product_attention(q, k, v, scale=scale, impl=i) for i in ("einsum", "jax")
    ]
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


def test_softmax_stays_float32_for_bfloat16_inputs():
    q, k, v = (x.astype(jnp.bfloat16) for x in random_qkv())
    logits = attention.attention_logits(q, k, 1.0)
    assert logits.dtype == jnp.float32
    assert attention.attention_weights(logits).dtype == jnp.float32


def test_fully_masked_row_is_finite():
    q, k, v = random_qkv()
    mask = jnp.zeros((2, 1, 5, 7), bool)
    assert np.isfinite(attention.dot_product_attention(q, k, v, mask=mask)).all()


def _module_logits(scale_name, **extra):
    cfg = AttentionConfig(num_heads=2, scale=scale_name, impl="einsum", **extra)
    module = attention.MultiHeadAttention(cfg)
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 4, 16))
    params = module.init(jax.random.PRNGKey(1), x, x)
    _, state = module.apply(params, x, x, mutable=["intermediates"])
    return params, np.asarray(state["intermediates"]["attention_weights"][0]), x


def test_scale_none_differs_from_sqrt_dk_exactly_by_the_factor():
    """Same parameters; `none` logits are sqrt(d_k) times the `sqrt_dk` logits."""
    cfg = ModelConfig(d_model=16, attention=AttentionConfig(num_heads=2))
    module_sqrt = attention.MultiHeadAttention(
        cfg.override({"attention.scale": "sqrt_dk"}).attention
    )
    module_none = attention.MultiHeadAttention(cfg.override({"attention.scale": "none"}).attention)
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 4, 16))
    params = module_sqrt.init(jax.random.PRNGKey(1), x, x)
    weights = {}
    for name, module in (("sqrt", module_sqrt), ("none", module_none)):
        _, state = module.apply(params, x, x, mutable=["intermediates"])
        weights[name] = state["intermediates"]["attention_weights"][0]
    # Recover logits up to a per-row constant: log-softmax differences against column 0.
    log_sqrt = np.log(weights["sqrt"]) - np.log(weights["sqrt"][..., :1])
    log_none = np.log(weights["none"]) - np.log(weights["none"][..., :1])
    np.testing.assert_allclose(log_none, log_sqrt * math.sqrt(cfg.head_dim), rtol=1e-4, atol=1e-4)


def test_learned_temperature_starts_at_sqrt_dk():
    params, learned, x = _module_logits("learned")
    tau = np.exp(params["params"]["log_temperature"])
    np.testing.assert_allclose(tau, [math.sqrt(8)] * 2, rtol=1e-6)
    module = attention.MultiHeadAttention(AttentionConfig(num_heads=2, impl="einsum"))
    _, state = module.apply(
        {"params": {k: v for k, v in params["params"].items() if k != "log_temperature"}},
        x,
        x,
        mutable=["intermediates"],
    )
    np.testing.assert_allclose(learned, state["intermediates"]["attention_weights"][0], rtol=1e-5)


def test_constant_temperature():
    _, w_const, _ = _module_logits("constant", temperature=math.sqrt(8.0))
    _, w_sqrt, _ = _module_logits("sqrt_dk")
    np.testing.assert_allclose(w_const, w_sqrt, rtol=1e-5)


@pytest.mark.parametrize("impl", ["einsum", "jax"])
def test_collecting_weights_does_not_change_outputs(impl):
    module = attention.MultiHeadAttention(AttentionConfig(num_heads=4, impl=impl))
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 16))
    params = module.init(jax.random.PRNGKey(1), x, x)
    plain = module.apply(params, x, x)
    collected, state = module.apply(params, x, x, mutable=["intermediates", "diagnostics"])
    np.testing.assert_allclose(plain, collected, rtol=1e-5, atol=1e-6)
    weights = state["intermediates"]["attention_weights"][0]
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    diag = state["diagnostics"]
    entropy = -(weights * np.log(weights)).sum(-1).mean()
    np.testing.assert_allclose(diag["attention_entropy"][0], entropy, rtol=1e-5)
    np.testing.assert_allclose(diag["attention_max_prob"][0], weights.max(-1).mean(), rtol=1e-6)


@pytest.mark.parametrize(
    "kind,self_attention,moves",
    [("rotary", True, True), ("rotary", False, False), ("sinusoidal", True, False)],
)
def test_only_rotary_self_attention_reads_positions(kind, self_attention, moves):
    """The positional slice reaches attention: rotary rotates self-attention queries and keys;
    cross-attention, and the additive encodings, leave attention blind to positions."""
    module = attention.MultiHeadAttention(
        AttentionConfig(num_heads=2), PositionalConfig(kind=kind), self_attention=self_attention
    )
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 4, 16))
    pos = jnp.arange(4)[None]
    params = module.init(jax.random.PRNGKey(1), x, x, q_pos_BT=pos, k_pos_BS=pos)
    out = module.apply(params, x, x, q_pos_BT=pos, k_pos_BS=pos)
    spread = module.apply(params, x, x, q_pos_BT=3 * pos, k_pos_BS=3 * pos)
    assert bool(np.abs(np.asarray(out - spread)).max() > 1e-4) == moves


def test_auto_impl_per_platform():
    assert attention.resolve_impl("auto", "cpu") == "einsum"
    assert attention.resolve_impl("auto", "gpu") == "cudnn"
    assert attention.resolve_impl("auto", "tpu") == "splash"
    assert attention.resolve_impl("auto", "tpu", splash_ok=False) == "jax"
    for impl in ("einsum", "jax", "cudnn", "splash"):
        assert attention.resolve_impl(impl, "tpu") == impl


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_causal_blocked_attention_equals_the_full_computation(kv_heads):
    """Skipping the keys after each query block changes nothing: values and gradients agree
    with one softmax over the whole causal, padded, ALiBi-biased square (T not a multiple)."""
    q, k, v = random_qkv(batch=2, q_len=150, k_len=150, kv_heads=kv_heads)
    pos = jnp.broadcast_to(jnp.arange(150), (2, 150))
    valid = jnp.arange(150)[None, :] < jnp.array([[150], [97]])
    mask = masks.combine(masks.padding_mask(valid), masks.causal_mask(pos, pos))
    bias = jnp.asarray(np.random.default_rng(1).normal(size=(1, 4, 150, 150)), jnp.float32)

    def full(q, k, v):
        return attention.dot_product_attention(q, k, v, mask=mask, bias=bias, impl="einsum")

    def blocked(q, k, v):
        return attention.causal_blocked_attention(
            q, k, v, scale=1 / math.sqrt(8), mask=mask, bias=bias, block=64
        )

    # Jitted: one compile each instead of an eager dispatch (and compile) per operation.
    np.testing.assert_allclose(
        jax.jit(blocked)(q, k, v), jax.jit(full)(q, k, v), rtol=1e-5, atol=1e-5
    )
    loss = lambda f: lambda *qkv: jnp.sum(f(*qkv) ** 2)  # noqa: E731
    grads_full = jax.jit(jax.grad(loss(full), argnums=(0, 1, 2)))(q, k, v)
    grads_blocked = jax.jit(jax.grad(loss(blocked), argnums=(0, 1, 2)))(q, k, v)
    for got, want in zip(grads_blocked, grads_full, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
