"""Evaluation at random positions (model.positional.eval_positions): a fresh draw per batch,
reproducible per seed, as tensor2tensor's offsets and Ruoss et al.'s subsets are drawn at
evaluation."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.models import build_model
from transformer_jax.train import step as steps

UT = {"universal.enabled": True, "universal.steps": 3, "positional.max_len": 24}
CASES = {
    "step_offset": {**UT, "positional.train_positions": "step_offset"},
    "batch_randomized": {"positional.train_positions": "batch_randomized"},
}


def _batch(seed: int) -> dict:
    ids_BT = jax.random.randint(jax.random.PRNGKey(seed), (4, 7), 3, 13)
    return {"inputs": ids_BT, "targets": ids_BT, "example_weights": jnp.ones(4, jnp.float32)}


@functools.cache
def _params(model):
    """The model's parameters, initialised once per model (the same for every seed: the seed is
    the state's key, which draws the evaluation positions)."""
    batch = _batch(0)
    return model.init(jax.random.PRNGKey(0), batch["inputs"], batch["targets"])["params"]


def _state(model, seed: int) -> steps.TrainState:
    return steps.TrainState(
        step=jnp.int32(0),
        params=_params(model),
        batch_stats={},
        opt_state=(),
        rng=jax.random.PRNGKey(seed),
    )


@functools.cache
def _eval_step(model):
    """The model's eval step, jitted once (op by op, the universal model's steps take long)."""
    return jax.jit(functools.partial(steps.eval_step, model=model, diagnostics=False))


def _loss(model, state, batch) -> float:
    loss_sum, weight = _eval_step(model)(state, batch)["loss"]
    return float(loss_sum / weight)


@pytest.mark.parametrize("scheme", list(CASES))
def test_random_eval_positions_are_fresh_per_batch_and_reproducible_per_seed(scheme):
    changes = {**CASES[scheme], "positional.eval_positions": scheme}
    model = build_model(tiny_model("encoder_decoder", changes))
    plain = build_model(tiny_model("encoder_decoder", CASES[scheme]))
    state = _state(model, seed=0)
    batch = _batch(1)
    first = _loss(model, state, batch)
    assert _loss(model, state, batch) == first  # the same seed reads the batch the same way
    assert _loss(model, _state(model, seed=0), batch) == first  # a rerun of the seed too
    assert _loss(model, _state(model, seed=1), batch) != first  # another seed draws anew
    assert _loss(plain, state, batch) != first  # the positions are not the plain ones
    # The key is the run's key folded with the batch: explicit, so a reader can redraw it.
    key = jax.random.fold_in(
        jax.random.fold_in(state.rng, steps.EVAL_POSITIONS_STREAM), steps.batch_fingerprint(batch)
    )
    np.testing.assert_array_equal(key, steps.eval_positions_key(state, batch))
    logits, *_ = steps.forward(
        model, {"params": state.params}, batch, train=False, rngs={"positions": key}
    )
    reference = steps.forward(plain, {"params": state.params}, batch, train=False)[0]
    assert not np.allclose(logits, reference, atol=1e-4)


def test_batches_get_fresh_keys_and_plain_evaluation_ignores_them():
    state = _state(build_model(tiny_model("encoder_decoder", CASES["step_offset"])), seed=0)
    keys = {tuple(np.asarray(steps.eval_positions_key(state, _batch(s)))) for s in range(20)}
    assert len(keys) == 20
    # A batch's fingerprint depends on where each id sits, not only on which ids it holds.
    batch = _batch(3)
    swapped = {**batch, "inputs": batch["inputs"][::-1]}
    assert steps.batch_fingerprint(batch) != steps.batch_fingerprint(swapped)
    plain = build_model(tiny_model("encoder_decoder", CASES["step_offset"]))
    assert _loss(plain, state, batch) == _loss(plain, _state(plain, seed=5), batch)
