"""A batch's "targets_weights" (data.layout="prompt") restricts the loss to the answer."""

import jax
import jax.numpy as jnp
import numpy as np
from tiny_configs import tiny_model

from transformer_jax.models import build_model
from transformer_jax.train import step as steps


def test_forward_weights_only_the_tokens_targets_weights_marks():
    model = build_model(tiny_model("decoder_only"))
    targets = jnp.array([[3, 4, 12, 4, 3, 2, 0, 0]], jnp.int32)
    answer = jnp.array([[0, 0, 0, 1, 1, 1, 0, 0]], jnp.float32)
    batch = {"targets": targets, "example_weights": jnp.ones(1)}
    variables = model.init(jax.random.PRNGKey(0), targets)
    _, _, all_tokens, _ = steps.forward(model, variables, batch, train=False)
    np.testing.assert_array_equal(all_tokens, [[1, 1, 1, 1, 1, 1, 0, 0]])
    batch["targets_weights"] = answer
    _, _, weights, _ = steps.forward(model, variables, batch, train=False)
    np.testing.assert_array_equal(weights, answer)
