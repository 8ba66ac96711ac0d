"""Non-finite detection names the step and metrics; tree_norm is the global L2 norm."""

import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.train.numerics import NonFiniteError, check_finite, tree_norm


def test_check_finite_passes_finite_metrics():
    check_finite(7, {"loss": jnp.float32(2.5), "grad_norm": np.float64(1e30), "n": 3})


def test_check_finite_names_step_and_every_bad_metric():
    metrics = {"loss": jnp.float32(jnp.nan), "grad_norm": np.inf, "param_norm": 1.0}
    with pytest.raises(NonFiniteError, match=r"non-finite grad_norm, loss at step 42") as info:
        check_finite(42, metrics)
    assert info.value.step == 42
    assert info.value.what == "grad_norm, loss"


def test_check_finite_sees_nan_inside_arrays():
    with pytest.raises(NonFiniteError, match="per_layer"):
        check_finite(1, {"per_layer": jnp.array([1.0, -jnp.inf])})


def test_tree_norm_is_global_l2_norm_in_float32():
    tree = {"a": jnp.arange(6.0).reshape(2, 3), "b": [jnp.array([3.0, -4.0], jnp.bfloat16)]}
    expected = np.sqrt(np.sum(np.arange(6.0) ** 2) + 25.0)
    norm = tree_norm(tree)
    assert norm.dtype == jnp.float32
    np.testing.assert_allclose(norm, expected, rtol=1e-6)
