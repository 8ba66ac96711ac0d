"""Scanned layers compute what unrolled layers compute; remat changes memory, not gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.config import (
    ModelConfig,
)
from transformer_jax.models import build_model
from transformer_jax.models.scan import stack_layers, unstack_layers
from transformer_jax.train import step as steps

CONFIGS = {
    "decoder_only": dict(family="decoder_only"),
    "encoder_decoder_batchnorm": {"family": "encoder_decoder", "norm.kind": "batchnorm"},
}


TINY = tiny_model("encoder_decoder", vocab_size=11, num_encoder_layers=3, num_decoder_layers=3)


def tiny(**changes) -> ModelConfig:
    """TINY with `changes`, dotted paths allowed ("norm.kind")."""
    return TINY.override(changes)


def inputs(family):
    ids = jax.random.randint(jax.random.PRNGKey(1), (2, 8), 0, 11)
    return (ids, ids) if family == "encoder_decoder" else (ids,)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_scan_matches_unrolled_with_converted_params(name):
    cfg = tiny(**CONFIGS[name])
    args = inputs(cfg.family)
    unrolled = build_model(cfg)
    variables = unrolled.init(jax.random.PRNGKey(0), *args)
    scanned = build_model(cfg.replace(scan_layers=True))
    expected_tree = jax.eval_shape(lambda: scanned.init(jax.random.PRNGKey(0), *args))
    stacked = stack_layers(variables)
    assert jax.tree.structure(stacked) == jax.tree.structure(expected_tree)
    np.testing.assert_allclose(
        scanned.apply(stacked, *args), unrolled.apply(variables, *args), atol=1e-5
    )
    back = unstack_layers(stacked)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), back, variables))


@pytest.mark.parametrize("scan, remat", [(False, "full"), (True, "dots_saveable")])
def test_remat_gives_the_same_gradients(scan, remat):
    cfg = tiny(family="decoder_only", dropout_rate=0.1, scan_layers=scan)
    (ids,) = inputs(cfg.family)
    base = build_model(cfg)
    params = base.init(jax.random.PRNGKey(0), ids)["params"]

    def grads(model):
        def loss(p):
            rngs = {"dropout": jax.random.key(3)}
            logits = model.apply({"params": p}, ids, train=True, rngs=rngs)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 3])

        return jax.grad(loss)(params)

    expected, got = grads(base), grads(build_model(cfg.replace(remat=remat)))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), got, expected)


def test_scanned_diagnostics_keep_per_layer_names():
    cfg = tiny(family="decoder_only")
    (ids,) = inputs(cfg.family)
    names = {}
    for scan in (False, True):
        model = build_model(cfg.replace(scan_layers=scan))
        variables = model.init(jax.random.PRNGKey(0), ids)
        _, collected = model.apply(variables, ids, mutable=["diagnostics"])
        names[scan] = steps.flatten_diagnostics(collected["diagnostics"])
    assert names[True].keys() == names[False].keys()
    assert any("layer_2" in name for name in names[True])


def test_scan_with_kv_cache_is_refused():
    cfg = tiny(family="decoder_only", scan_layers=True)
    (ids,) = inputs(cfg.family)
    model = build_model(cfg).clone(use_cache=True)
    with pytest.raises(ValueError, match="model.scan_layers=True does not support the KV cache"):
        model.init(jax.random.PRNGKey(0), ids)


@pytest.mark.parametrize(
    "fields, match",
    [({"remat": "some"}, "model.remat='some'"), ({"scan_layers": 1}, "model.scan_layers=1")],
)
def test_bad_scan_config(fields, match):
    with pytest.raises(ValueError, match=match):
        tiny(**fields)
