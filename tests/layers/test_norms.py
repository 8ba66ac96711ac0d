"""Norms against their formulas (NCCU slides 57-63)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.config import NormConfig
from transformer_jax.layers import norms

X = np.random.default_rng(0).normal(2.0, 3.0, size=(4, 5, 8)).astype(np.float32)


def apply(module, x=X, **kwargs):
    variables = module.init(jax.random.PRNGKey(0), x)
    return module.apply(variables, x, **kwargs)


@pytest.mark.parametrize("use_jit", [False, True])
def test_layernorm(use_jit):
    module = norms.LayerNorm(1e-6)
    variables = module.init(jax.random.PRNGKey(0), X)
    fn = jax.jit(module.apply) if use_jit else module.apply
    mean, var = X.mean(-1, keepdims=True), X.var(-1, keepdims=True)
    np.testing.assert_allclose(
        fn(variables, X), (X - mean) / np.sqrt(var + 1e-6), rtol=1e-4, atol=1e-5
    )


def test_rmsnorm():
    expected = X / np.sqrt((X**2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(apply(norms.RMSNorm(1e-6)), expected, rtol=1e-5, atol=1e-5)


def test_dyt_formula_and_alpha_init():
    module = norms.DyT(alpha_init=0.7)
    variables = module.init(jax.random.PRNGKey(0), X)
    assert float(variables["params"]["alpha"]) == pytest.approx(0.7)
    params = jax.tree.map(lambda p: p, variables)
    params["params"]["scale"] = jnp.full((8,), 2.0)
    params["params"]["bias"] = jnp.full((8,), 0.5)
    np.testing.assert_allclose(module.apply(params, X), 2.0 * np.tanh(0.7 * X) + 0.5, rtol=1e-5)


def test_dyt_fixed_alpha_is_a_constant_not_a_parameter():
    cfg = NormConfig(kind="dyt", dyt_alpha_init=0.7, dyt_learnable_alpha=False)
    module = norms.make_norm(cfg)
    variables = module.init(jax.random.PRNGKey(0), X)
    assert set(variables["params"]) == {"scale", "bias"}
    np.testing.assert_allclose(module.apply(variables, X), np.tanh(0.7 * X), rtol=1e-5)
    learnable = norms.make_norm(dataclasses.replace(cfg, dyt_learnable_alpha=True))
    assert "alpha" in learnable.init(jax.random.PRNGKey(0), X)["params"]


def test_batchnorm_train_uses_batch_stats_and_eval_uses_running_averages():
    module = norms.BatchNorm(epsilon=1e-5, momentum=0.9)
    variables = module.init(jax.random.PRNGKey(0), X)
    out, updates = module.apply(variables, X, train=True, mutable=["batch_stats"])
    mean, var = X.mean((0, 1)), X.var((0, 1))
    np.testing.assert_allclose(out, (X - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
    stats = jax.tree.map(np.asarray, updates["batch_stats"]["norm"])
    np.testing.assert_allclose(stats["mean"], 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(stats["var"], 0.9 + 0.1 * var, rtol=1e-5)
    evaluated = module.apply({**variables, **updates}, X, train=False)
    expected = (X - stats["mean"]) / np.sqrt(stats["var"] + 1e-5)
    np.testing.assert_allclose(evaluated, expected, rtol=1e-4, atol=1e-4)
    assert not np.allclose(evaluated, out, atol=1e-2)


def test_registry_covers_every_norm():
    for name in ("layernorm", "rmsnorm", "dyt", "batchnorm", "none"):
        module = norms.make_norm(NormConfig(kind=name))
        assert apply(module).shape == X.shape
    np.testing.assert_array_equal(apply(norms.make_norm(NormConfig(kind="none"))), X)
    with pytest.raises(ValueError, match=r"model.norm.kind='groupnorm' is not valid"):
        norms.NORMS["groupnorm"]


def test_epsilon_reaches_the_norm():
    big = norms.make_norm(NormConfig(kind="layernorm", epsilon=100.0))
    mean, var = X.mean(-1, keepdims=True), X.var(-1, keepdims=True)
    np.testing.assert_allclose(apply(big), (X - mean) / np.sqrt(var + 100.0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("offset", "bound"), [(10.0, 1e-5), (100.0, 1e-4), (1000.0, 1e-3)])
def test_layernorm_without_fast_variance_keeps_float32_precision_at_large_offsets(offset, bound):
    """Features sharing a large offset: E[(x - mean)^2] (torch's form) stays within float32
    rounding of the float64 formula; E[x^2] - E[x]^2 (flax's fast variance) loses digits."""
    x = (offset + np.random.default_rng(1).normal(size=(8, 16, 256))).astype(np.float32)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    expected = (x64 - mean) / np.sqrt(var + 1e-5)
    config = NormConfig(epsilon=1e-5, fast_variance=False)
    error = np.abs(np.asarray(apply(norms.make_norm(config), x), np.float64) - expected).max()
    assert error < bound
    if offset == 1000.0:
        fast = norms.make_norm(NormConfig(epsilon=1e-5))
        assert np.abs(np.asarray(apply(fast, x), np.float64) - expected).max() > 100 * error


def test_fast_variance_is_refused_where_no_variance_is_computed():
    for kind in ("layernorm", "batchnorm"):
        NormConfig(kind=kind, fast_variance=False)
    with pytest.raises(ValueError, match=r"model.norm.fast_variance=False has no effect"):
        NormConfig(kind="rmsnorm", fast_variance=False)
