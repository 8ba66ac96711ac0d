"""Splash attention (layers/splash.py) against the einsum path, in Pallas's interpreter on the
CPU, and the choice of attention kernel per platform, dtype and shapes (layers/attention.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.layers import attention, masks, splash
from transformer_jax.models import build_model
from transformer_jax.train.trainer import for_platform

BLOCK = splash.BLOCKS[-1]  # the kernel's smallest legal block: the cheapest shapes to interpret


def random_qkv(q_len, kv_len, heads=4, kv_heads=2, head_dim=16, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(2, q_len, heads, head_dim), (2, kv_len, kv_heads, head_dim)]
    q = rng.normal(size=shapes[0])
    k, v = rng.normal(size=shapes[1]), rng.normal(size=shapes[1])
    return tuple(jnp.asarray(x, jnp.float32) for x in (q, k, v))


def interpreted(q, k, v, *, scale, segments, causal):
    """The splash kernel in Pallas's interpreter; `segments`: query and key segment ids."""
    q_segments_BT, kv_segments_BS = segments
    return splash.splash_attention(
        q,
        k,
        v,
        scale=scale,
        q_segments_BT=q_segments_BT,
        kv_segments_BS=kv_segments_BS,
        causal=causal,
        interpret=True,
    )


def assert_same_on_valid(q, k, v, *, scale, mask, segments, causal, valid_BT):
    """Values and gradients of a loss on the valid queries agree between splash and einsum."""
    weight_BT11 = valid_BT[:, :, None, None].astype(jnp.float32)

    def splash_out(q, k, v):
        return interpreted(q, k, v, scale=scale, segments=segments, causal=causal)

    def einsum_out(q, k, v):
        return attention.dot_product_attention(q, k, v, scale=scale, mask=mask, impl="einsum")

    def loss(fn):
        return lambda q, k, v: jnp.sum(weight_BT11 * jnp.sin(fn(q, k, v)))

    np.testing.assert_allclose(
        weight_BT11 * splash_out(q, k, v), weight_BT11 * einsum_out(q, k, v), atol=2e-5
    )
    grads = jax.grad(loss(splash_out), argnums=(0, 1, 2))(q, k, v)
    expected = jax.grad(loss(einsum_out), argnums=(0, 1, 2))(q, k, v)
    for name, got, want in zip("qkv", grads, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=5e-5, err_msg=f"d loss / d {name}")


def test_causal_padded_packed_grouped_self_attention_equals_einsum():
    """Two blocks of queries (the kernel skips the block above the diagonal), two packed
    documents, a padded tail, 4 query heads on 2 key-value heads, a scale per head (the
    learned temperature's form, folded into q)."""
    length = 2 * BLOCK
    q, k, v = random_qkv(length, length)
    pos_BT = jnp.broadcast_to(jnp.arange(length), (2, length))
    valid_BT = pos_BT < jnp.array([[length], [length - 37]])
    packed_BT = (pos_BT >= 90).astype(jnp.int32) + 1
    mask = masks.combine(
        masks.padding_mask(valid_BT),
        masks.causal_mask(pos_BT, pos_BT),
        masks.segment_mask(packed_BT, packed_BT),
    )
    segments_BT = masks.self_attention_segments(valid_BT, packed_BT)
    assert_same_on_valid(
        q,
        k,
        v,
        scale=jnp.array([0.25, 0.5, 0.1, 1.0]),
        mask=mask,
        segments=(segments_BT, segments_BT),
        causal=True,
        valid_BT=valid_BT,
    )


def test_cross_attention_with_encoder_padding_equals_einsum():
    """Queries and keys of different lengths, the encoder's padding as key segments; an
    example with no valid encoder token gives no NaN."""
    q, k, v = random_qkv(BLOCK, 2 * BLOCK, kv_heads=4)
    memory_valid_BS = jnp.arange(2 * BLOCK)[None, :] < jnp.array([[200], [0]])
    q_segments, kv_segments = masks.cross_attention_segments(BLOCK, memory_valid_BS)
    out = interpreted(q, k, v, scale=0.25, segments=(q_segments, kv_segments), causal=False)
    assert np.isfinite(np.asarray(out)).all()
    assert_same_on_valid(
        q[:1],
        k[:1],
        v[:1],
        scale=0.25,
        mask=masks.padding_mask(memory_valid_BS[:1]),
        segments=(q_segments[:1], kv_segments[:1]),
        causal=False,
        valid_BT=jnp.ones((1, BLOCK), bool),
    )


@pytest.mark.slow
@pytest.mark.parametrize("kv_heads", [4, 1])
@pytest.mark.parametrize("length", [BLOCK, 3 * BLOCK])
def test_bidirectional_padded_self_attention_equals_einsum(kv_heads, length):
    """The encoder's mask (padding and packing, no causal order); multi-query attention."""
    q, k, v = random_qkv(length, length, kv_heads=kv_heads, seed=1)
    pos_BT = jnp.broadcast_to(jnp.arange(length), (2, length))
    valid_BT = pos_BT < jnp.array([[length - 5], [length // 2]])
    packed_BT = (pos_BT >= length // 3).astype(jnp.int32)
    mask = masks.combine(masks.padding_mask(valid_BT), masks.segment_mask(packed_BT, packed_BT))
    segments_BT = masks.self_attention_segments(valid_BT, packed_BT)
    assert_same_on_valid(
        q,
        k,
        v,
        scale=1.0,
        mask=mask,
        segments=(segments_BT, segments_BT),
        causal=False,
        valid_BT=valid_BT,
    )


def test_lengths_without_a_block_are_refused():
    q, k, v = random_qkv(BLOCK + 8, BLOCK + 8)
    segments_BT = jnp.zeros((2, BLOCK + 8), jnp.int32)
    with pytest.raises(ValueError, match="multiples of 128"):
        splash.splash_attention(
            q, k, v, scale=1.0, q_segments_BT=segments_BT, kv_segments_BS=segments_BT, causal=True
        )


def test_block_is_the_largest_that_divides():
    assert [splash.block_for(n) for n in (128, 384, 512, 1024, 640, 100)] == [
        128,
        128,
        512,
        512,
        128,
        None,
    ]


@pytest.mark.parametrize(
    ("platform", "dtype", "q_len", "head_dim", "expected"),
    [
        ("cpu", "float32", 128, 64, "einsum"),
        ("gpu", "bfloat16", 128, 64, "cudnn"),
        ("gpu", "float16", 100, 128, "cudnn"),
        ("gpu", "float32", 128, 64, "xla"),  # cuDNN's fused kernel takes half precision only
        ("gpu", "bfloat16", 128, 12, "xla"),  # head dimension not a multiple of 8
        ("gpu", "bfloat16", 128, 256, "xla"),  # head dimension above 128
        ("gpu", "bfloat16", 101, 64, "xla"),  # odd length with a mask
        ("tpu", "float32", 256, 64, "splash"),
        ("tpu", "bfloat16", 1024, 128, "splash"),
        ("tpu", "float32", 100, 64, "xla"),  # no block divides the length
    ],
)
def test_auto_kernel_is_a_function_of_platform_dtype_and_shapes(
    platform, dtype, q_len, head_dim, expected
):
    impl = attention.resolve_impl("auto", platform)
    chosen = attention.kernel_for(
        impl, dtype=jnp.dtype(dtype), q_len=q_len, kv_len=q_len, head_dim=head_dim, segments=True
    )
    assert chosen == expected


def test_splash_needs_the_mask_as_segments():
    """Incremental decoding, windows and position-built masks come without segment ids."""
    shapes = dict(dtype=jnp.float32, q_len=256, kv_len=256, head_dim=64)
    assert attention.kernel_for("splash", segments=False, **shapes) == "xla"
    assert attention.kernel_for("splash", segments=True, **shapes) == "splash"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"positional.kind": "alibi"}, "model.positional.kind"),
        ({"attention.sliding_window": 16}, "model.attention.sliding_window"),
        ({"attention.dropout_rate": 0.1}, "model.attention.dropout_rate"),
    ],
)
def test_splash_refuses_what_it_cannot_express_and_auto_takes_the_jax_path(changes, field):
    with pytest.raises(ValueError, match=f"impl='splash' cannot run this model: {field}="):
        tiny_model(changes={"attention.impl": "splash", **changes})
    config = tiny_model(changes=changes)
    assert for_platform(config, "tpu").attention.impl == "jax"
    assert for_platform(tiny_model(), "tpu").attention.impl == "splash"


def test_platform_and_device_count_of_the_kernels():
    assert for_platform(tiny_model(), "tpu", num_devices=8).attention.impl == "jax"
    assert for_platform(tiny_model(), "gpu").attention.impl == "cudnn"
    splash_model = tiny_model(changes={"attention.impl": "splash"})
    with pytest.raises(ValueError, match="impl='splash' runs on TPUs only; .* cpu"):
        for_platform(splash_model, "cpu")
    with pytest.raises(ValueError, match="impl='splash' runs on one TPU chip, not 8"):
        for_platform(splash_model, "tpu", num_devices=8)
    with pytest.raises(ValueError, match="impl='cudnn' runs on GPUs only"):
        for_platform(tiny_model(changes={"attention.impl": "cudnn"}), "tpu")


@pytest.fixture
def interpreted_in_models(monkeypatch):
    """Models' splash calls in Pallas's interpreter (they call the kernel as on a TPU; Pallas's
    forced TPU interpret mode does not take the kernel's vmap over the batch)."""
    interpreted = functools.partial(splash.splash_attention, interpret=True)
    monkeypatch.setattr(splash, "splash_attention", interpreted)


@pytest.mark.usefixtures("interpreted_in_models")
def test_decoder_only_model_with_splash_equals_einsum():
    """The stack hands its self-attention mask over as segment ids: a padded, packed batch
    gives the einsum model's logits on every real token."""
    changes = {"positional.max_len": BLOCK, "attention.scale": "learned"}
    ids_BT = jax.random.randint(jax.random.PRNGKey(0), (2, BLOCK), 1, 13)
    ids_BT = ids_BT.at[1, 100:].set(0)  # padding
    packed_BT = (jnp.arange(BLOCK)[None, :] >= 60).astype(jnp.int32).repeat(2, axis=0)
    einsum_model = build_model(tiny_model(changes={**changes, "attention.impl": "einsum"}))
    splash_model = build_model(tiny_model(changes={**changes, "attention.impl": "splash"}))
    params = einsum_model.init(jax.random.PRNGKey(1), ids_BT, segment_ids_BT=packed_BT)
    want = einsum_model.apply(params, ids_BT, segment_ids_BT=packed_BT)
    got = splash_model.apply(params, ids_BT, segment_ids_BT=packed_BT)
    valid_BT1 = (ids_BT != 0)[:, :, None]
    np.testing.assert_allclose(valid_BT1 * got, valid_BT1 * want, atol=2e-5)


@pytest.mark.slow
@pytest.mark.usefixtures("interpreted_in_models")
def test_encoder_decoder_model_with_splash_equals_einsum():
    """The encoder's bidirectional self-attention and the decoder's cross-attention take the
    padding as segment ids too; an example whose source is all padding stays finite."""
    changes = {"positional.max_len": BLOCK}
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    inputs_BS = jax.random.randint(keys[0], (3, BLOCK), 1, 13).at[1, 70:].set(0).at[2].set(0)
    targets_BT = jax.random.randint(keys[1], (3, BLOCK), 1, 13).at[0, 90:].set(0)
    einsum_model = build_model(
        tiny_model("encoder_decoder", {**changes, "attention.impl": "einsum"})
    )
    splash_model = build_model(
        tiny_model("encoder_decoder", {**changes, "attention.impl": "splash"})
    )
    params = einsum_model.init(jax.random.PRNGKey(1), inputs_BS, targets_BT)
    want = einsum_model.apply(params, inputs_BS, targets_BT)
    got = splash_model.apply(params, inputs_BS, targets_BT)
    assert np.isfinite(np.asarray(got)).all()
    valid_BT1 = (targets_BT != 0)[:2, :, None]  # the third example has no source
    np.testing.assert_allclose(valid_BT1 * got[:2], valid_BT1 * want[:2], atol=2e-5)
