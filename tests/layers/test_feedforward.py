"""The feed-forward network's activations against their formulas (Vaswani §3.3; Hendrycks &
Gimpel 2016 for GELU), written independently in NumPy."""

import math

import jax
import numpy as np
import pytest

from transformer_jax.layers import feedforward

X = np.linspace(-6.0, 6.0, 2001, dtype=np.float32)


def gelu_erf(x):
    """x Phi(x), Phi the standard normal CDF (Hendrycks & Gimpel 2016, §2)."""
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    """The paper's tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("relu", lambda x: np.maximum(x, 0.0)),
        ("gelu", gelu_tanh),
        ("gelu_exact", gelu_erf),
        ("silu", lambda x: x / (1.0 + np.exp(-x))),  # x sigmoid(x), Marian's "swish"
    ],
)
def test_activation_matches_its_formula(name, reference):
    activation = feedforward.ACTIVATIONS[name]
    assert not activation.gated
    np.testing.assert_allclose(activation.fn(X), reference(X), rtol=1e-5, atol=1e-6)


def test_gelu_is_the_tanh_approximation_not_the_erf_form():
    gelu = np.asarray(feedforward.ACTIVATIONS["gelu"].fn(X))
    assert np.max(np.abs(gelu - gelu_erf(X))) > 1e-4


def test_feedforward_with_gelu_exact_is_w2_gelu_w1():
    config = feedforward.FeedForwardConfig(activation="gelu_exact", d_ff=16)
    module = feedforward.FeedForward(config)
    x_BTD = np.random.default_rng(0).normal(size=(2, 3, 8)).astype(np.float32)
    variables = module.init(jax.random.PRNGKey(0), x_BTD)
    p = variables["params"]
    hidden = gelu_erf(x_BTD @ np.asarray(p["wi"]["kernel"]) + np.asarray(p["wi"]["bias"]))
    expected = hidden @ np.asarray(p["wo"]["kernel"]) + np.asarray(p["wo"]["bias"])
    np.testing.assert_allclose(module.apply(variables, x_BTD), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ["silu", "swiglu"])
def test_feedforward_without_biases(activation):
    """use_bias=False (Llama's mlp_bias): W_2 act(W_1 x) [* W_3 x] with no bias parameter."""
    config = feedforward.FeedForwardConfig(activation=activation, d_ff=16, use_bias=False)
    module = feedforward.FeedForward(config)
    x_BTD = np.random.default_rng(0).normal(size=(2, 3, 8)).astype(np.float32)
    variables = module.init(jax.random.PRNGKey(0), x_BTD)
    p = {name: np.asarray(dense["kernel"]) for name, dense in variables["params"].items()}
    assert all(set(dense) == {"kernel"} for dense in variables["params"].values())
    pre = x_BTD @ p["wi"]
    hidden = pre / (1.0 + np.exp(-pre))
    if activation == "swiglu":
        hidden = hidden * (x_BTD @ p["wg"])
    expected = hidden @ p["wo"]
    np.testing.assert_allclose(module.apply(variables, x_BTD), expected, rtol=1e-4, atol=1e-5)
