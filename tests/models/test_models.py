"""Model-level properties: causality, padding, permutation equivariance, every switch matters."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.config import ViTConfig
from transformer_jax.families import family_of
from transformer_jax.models import build_model
from transformer_jax.models.stack import TransformerStack

TINY = tiny_model(
    "encoder_decoder",
    {"positional.max_len": 16},
    vocab_size=16,
    num_classes=3,
    num_encoder_layers=2,
)
IDS = jnp.array([[3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 5, 4, 0, 0, 0]], jnp.int32)


def model_inputs(cfg, ids=IDS):
    return (ids, ids) if cfg.family == "encoder_decoder" else (ids,)


def init_and_apply(cfg, *inputs, seed=0):
    model = build_model(cfg)
    inputs = inputs or model_inputs(cfg)
    variables = model.init(jax.random.PRNGKey(seed), *inputs)
    return model.apply({k: v for k, v in variables.items() if k != "diagnostics"}, *inputs)


@pytest.mark.parametrize("family", ["encoder_decoder", "decoder_only", "encoder_classifier"])
def test_shapes_and_jit(family):
    """Eager and jitted application give the same float32 logits of the family's shape."""
    cfg = TINY.replace(family=family)
    model = build_model(cfg)
    inputs = model_inputs(cfg)
    variables = model.init(jax.random.PRNGKey(0), *inputs)
    params = {"params": variables["params"]}
    eager, jitted = model.apply(params, *inputs), jax.jit(model.apply)(params, *inputs)
    expected = (2, 3) if family == "encoder_classifier" else (2, 8, 16)
    for out in (eager, jitted):
        assert out.shape == expected and out.dtype == jnp.float32
    np.testing.assert_allclose(jitted, eager, rtol=1e-5, atol=1e-5)


def stack_jacobian(cfg, causal, length=6):
    """d output[i] / d input[j], summed over features: (T, T) sensitivity map of a stack."""
    stack = TransformerStack(cfg, 2, causal=causal)
    pos = jnp.arange(length)[None]
    valid = jnp.ones((1, length), bool)
    x = jax.random.normal(jax.random.PRNGKey(0), (1, length, cfg.d_model))
    variables = stack.init(jax.random.PRNGKey(1), x, positions_BT=pos, valid_BT=valid)
    f = lambda x: stack.apply(variables, x, positions_BT=pos, valid_BT=valid)[0]  # noqa: E731
    # Jitted: one compile instead of an eager dispatch (and compile) per operation.
    jac = jax.jit(jax.jacobian(f))(x)[:, :, 0]  # (T, D, T, D)
    return np.abs(np.asarray(jac)).sum(axis=(1, 3))


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary", "alibi", "learned", "none"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt"])
def test_decoder_is_causal(positional, norm):
    sensitivity = stack_jacobian(
        TINY.override({"positional.kind": positional, "norm.kind": norm}), causal=True
    )
    assert np.all(sensitivity[np.triu_indices(6, k=1)] == 0.0)
    assert np.all(sensitivity[np.tril_indices(6)] > 0.0)


@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_sees_only_its_window_and_global_tokens(causal):
    cfg = TINY.override({"attention.sliding_window": 2, "attention.num_global_tokens": 1})
    stack = TransformerStack(cfg, 1, causal=causal)
    length = 8
    pos = jnp.arange(length)[None]
    x = jax.random.normal(jax.random.PRNGKey(0), (1, length, cfg.d_model))
    kw = dict(positions_BT=pos, valid_BT=jnp.ones((1, length), bool))
    variables = stack.init(jax.random.PRNGKey(1), x, **kw)
    jac = jax.jit(jax.jacobian(lambda x: stack.apply(variables, x, **kw)[0]))(x)[:, :, 0]
    seen = np.abs(np.asarray(jac)).sum(axis=(1, 3)) > 0
    for i in range(length):
        for j in range(length):
            in_window = (0 <= i - j < 2) if causal else abs(i - j) <= 1
            allowed = in_window or j == 0 or (i == 0 and not causal)
            if causal:
                allowed = allowed and j <= i
            assert seen[i, j] == allowed, (i, j)


def test_encoder_is_not_causal():
    sensitivity = stack_jacobian(TINY, causal=False)
    assert np.all(sensitivity > 0.0)


@pytest.mark.parametrize("family", ["encoder_decoder", "encoder_classifier", "decoder_only"])
def test_padding_content_does_not_change_real_positions(family):
    cfg = TINY.replace(family=family, pooling="mean")
    model = build_model(cfg)
    ids = IDS
    variables = {"params": model.init(jax.random.PRNGKey(0), *model_inputs(cfg))["params"]}
    # Padding is id 0; a model must not read the embedding behind it. Change the padding
    # *embedding* by perturbing the table row 0: outputs at real positions must not move.
    out = model.apply(variables, *model_inputs(cfg, ids))
    perturbed = jax.tree_util.tree_map_with_path(
        lambda path, p: p.at[0].add(5.0) if "embedding" in jax.tree_util.keystr(path) else p,
        variables,
    )
    out2 = model.apply(perturbed, *model_inputs(cfg, ids))
    if family == "encoder_classifier":
        np.testing.assert_allclose(out, out2, rtol=1e-5, atol=1e-5)
    else:
        real = np.asarray(ids != 0)
        np.testing.assert_allclose(
            np.asarray(out)[real], np.asarray(out2)[real], rtol=1e-5, atol=1e-5
        )


def test_encoder_decoder_cross_attention_ignores_source_padding():
    cfg = TINY
    model = build_model(cfg)
    src_a = jnp.array([[3, 4, 5, 0, 0, 0, 0, 0]])
    src_b = jnp.array([[3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0]])  # more padding, same content
    tgt = jnp.array([[1, 6, 7]])
    variables = {"params": model.init(jax.random.PRNGKey(0), src_a, tgt)["params"]}
    np.testing.assert_allclose(
        model.apply(variables, src_a, tgt), model.apply(variables, src_b, tgt), rtol=1e-5, atol=1e-5
    )


def encoder_states(cfg, ids):
    model = build_model(cfg.replace(family="encoder_decoder"))
    variables = model.init(jax.random.PRNGKey(0), ids, ids)
    memory, _ = model.apply(variables, ids, method=model.encode)
    return np.asarray(memory)


def test_without_positional_encoding_the_encoder_is_permutation_equivariant():
    """The "Amy" example (NTHU slide 21): shuffle the words, the outputs move with them."""
    ids = jnp.array([[3, 4, 5, 6, 7, 8, 9, 10]])
    perm = np.array([5, 2, 7, 0, 1, 6, 3, 4])
    cfg = TINY.override({"positional.kind": "none"})
    np.testing.assert_allclose(
        encoder_states(cfg, ids)[:, perm], encoder_states(cfg, ids[:, perm]), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary", "alibi", "index"])
def test_with_positional_encoding_the_encoder_is_not_equivariant(positional):
    ids = jnp.array([[3, 4, 5, 6, 7, 8, 9, 10]])
    perm = np.array([5, 2, 7, 0, 1, 6, 3, 4])
    cfg = TINY.override({"positional.kind": positional})
    difference = np.abs(encoder_states(cfg, ids)[:, perm] - encoder_states(cfg, ids[:, perm]))
    assert difference.max() > 1e-3


SWITCHES = {
    "attention.scale": ["none", "constant"],
    "positional.kind": ["learned", "rotary", "alibi", "none", "index"],
    "positional.base": [100.0],
    "norm.kind": ["rmsnorm", "dyt", "batchnorm", "none"],
    "norm.position": ["pre"],
    "norm.residual": [False],
    "ffn.activation": ["gelu", "swiglu"],
    "embeddings.scale": [False],
    "embeddings.tie_output": [False],
    "embeddings.share_source_target": [False],
    "attention.num_kv_heads": [1],
    "attention.sliding_window": [2],
    "norm.dyt_alpha_init": [1.5],
}


@pytest.mark.parametrize(
    "field,value", [(f, v) for f, values in SWITCHES.items() for v in values], ids=str
)
def test_every_switch_changes_the_output(field, value):
    base = TINY.override({"norm.kind": "dyt"}) if field == "norm.dyt_alpha_init" else TINY
    changed = base.override({field: value})
    if field == "attention.scale" and value == "constant":
        changed = changed.override({"attention.temperature": 0.5})
    out_base = init_and_apply(base)
    out_changed = init_and_apply(changed)
    same_shapes = out_base.shape == out_changed.shape
    assert not (same_shapes and np.allclose(out_base, out_changed, atol=1e-4))


def test_learned_temperature_starts_at_sqrt_dk_and_is_trainable():
    """`learned` equals `sqrt_dk` at initialisation by design; its temperature gets gradients."""
    cfg = TINY.override({"attention.scale": "learned"})
    model = build_model(cfg)
    variables = {"params": model.init(jax.random.PRNGKey(0), IDS, IDS)["params"]}
    np.testing.assert_allclose(
        model.apply(variables, IDS, IDS), init_and_apply(TINY), rtol=1e-5, atol=1e-5
    )
    # Jitted: one compile instead of the backward pass op by op.
    grads = jax.jit(jax.grad(lambda p: model.apply({"params": p}, IDS, IDS).sum()))(
        variables["params"]
    )
    temperature_grads = [
        g
        for path, g in jax.tree_util.tree_leaves_with_path(grads)
        if "log_temperature" in jax.tree_util.keystr(path)
    ]
    assert len(temperature_grads) == 2 * 2 + 2  # encoder self, decoder self + cross, per layer
    assert all(np.abs(g).max() > 0 for g in temperature_grads)


def test_attention_implementations_agree_in_a_model():
    """jax.nn.dot_product_attention and the einsum reference, with an ALiBi bias and MQA."""
    alibi_mqa = TINY.override({"positional.kind": "alibi", "attention.num_kv_heads": 1})
    out = init_and_apply(alibi_mqa.override({"attention.impl": "jax"}))
    ref = init_and_apply(alibi_mqa.override({"attention.impl": "einsum"}))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_bfloat16_compute_keeps_float32_params_and_logits():
    cfg = TINY.replace(dtype="bfloat16")
    model = build_model(cfg)
    variables = model.init(jax.random.PRNGKey(0), IDS, IDS)
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables["params"]))
    assert model.apply({"params": variables["params"]}, IDS, IDS).dtype == jnp.float32


def test_dropout_only_in_training():
    cfg = TINY.replace(dropout_rate=0.5, family="decoder_only")
    cfg = cfg.override({"attention.dropout_rate": 0.5})
    model = build_model(cfg)
    variables = {"params": model.init(jax.random.PRNGKey(0), IDS)["params"]}
    eval_a = model.apply(variables, IDS)
    eval_b = model.apply(variables, IDS)
    np.testing.assert_array_equal(eval_a, eval_b)
    rngs = lambda s: {"dropout": jax.random.PRNGKey(s)}  # noqa: E731
    train_a = model.apply(variables, IDS, train=True, rngs=rngs(1))
    train_b = model.apply(variables, IDS, train=True, rngs=rngs(2))
    assert not np.allclose(train_a, train_b)


@pytest.mark.parametrize("packed", [False, True])
def test_blocked_causal_attention_agrees_with_the_whole_square(packed, monkeypatch):
    """Past one block of queries the einsum path skips each block's later keys; a decoder must
    still equal jax.nn.dot_product_attention over the whole square (packed documents too)."""
    from transformer_jax.layers import attention

    calls = []
    blocked = attention.causal_blocked_attention
    monkeypatch.setattr(
        attention, "causal_blocked_attention", lambda *a, **k: calls.append(1) or blocked(*a, **k)
    )
    length = attention.CAUSAL_BLOCK * 2 + 2
    cfg = TINY.replace(family="decoder_only")
    cfg = cfg.override({"positional.max_len": length, "positional.kind": "alibi"})
    ids = jax.random.randint(jax.random.PRNGKey(1), (2, length), 3, 16)
    kwargs = {}
    if packed:
        second = jnp.arange(length) >= 70
        kwargs = {
            "segment_ids_BT": jnp.tile(jnp.where(second, 2, 1), (2, 1)),
            "positions_BT": jnp.tile(jnp.arange(length) - 70 * second, (2, 1)),
        }
    outputs = {}
    for impl in ("einsum", "jax"):
        model = build_model(cfg.override({"attention.impl": impl}))
        variables = model.init(jax.random.PRNGKey(0), ids, **kwargs)
        outputs[impl] = model.apply(variables, ids, **kwargs)
    assert calls  # The einsum model took the blocked path.
    np.testing.assert_allclose(outputs["einsum"], outputs["jax"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "cfg",
    [
        TINY,
        TINY.replace(family="decoder_only"),
        TINY.replace(family="encoder_classifier", pooling="cls"),
        tiny_model(
            "vit",
            {"positional.kind": "learned", "positional.max_len": 17},
            num_classes=3,
            pooling="cls",
            vit=ViTConfig(image_size=8, num_channels=3, patch_size=2),
        ),
    ],
    ids=lambda cfg: cfg.family,
)
def test_the_example_batch_builds_the_parameters_of_a_data_batch(cfg):
    """What load_run builds a trained run's parameters from, without its data: a data batch
    gives parameters of the same shapes (the sequence or image fits the positions)."""
    family = family_of(cfg)
    if family.reads_images:
        batch = {"inputs": jnp.ones((2, 8, 8, 3))}
    else:
        batch = {"inputs": IDS, "targets": IDS}
    model = build_model(cfg)

    def shapes(batch):
        args, kwargs = family.inputs(batch, cfg.tokens)
        init = lambda: model.init(jax.random.PRNGKey(0), *args, **kwargs)  # noqa: E731
        return jax.tree.map(lambda x: x.shape, jax.eval_shape(init)["params"])

    assert shapes(family.example_batch(cfg)) == shapes(batch)
