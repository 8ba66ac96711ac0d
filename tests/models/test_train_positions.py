"""`model.positional.train_positions` in whole models: random positions in training only."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.layers.positional import training_positions
from transformer_jax.models import MODULES, build_model, stack

CASES = [
    ("encoder_decoder", "sinusoidal", "offset", False),
    ("encoder_decoder", "sinusoidal", "batch_offset", False),
    # The universal model's compile is the costly part: the fast tier keeps step_offset's.
    pytest.param("encoder_decoder", "learned", "randomized", True, marks=pytest.mark.slow),
    ("decoder_only", "rotary", "randomized", False),
    ("decoder_only", "alibi", "randomized", False),
    ("encoder_decoder", "sinusoidal", "step_offset", True),
    ("encoder_decoder", "learned", "batch_randomized", False),
    ("decoder_only", "rotary", "batch_randomized", False),
]


def _batch():
    ids = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]], np.int32)
    return jnp.asarray(ids)


def _apply(config, variables, ids, *, train, seed=0):
    module = build_model(config)
    args = (ids, ids) if config.family == "encoder_decoder" else (ids,)
    rngs = {"positions": jax.random.PRNGKey(seed)} if train else None
    return module.apply(variables, *args, train=train, rngs=rngs)


@pytest.mark.parametrize(("family", "kind", "scheme", "universal"), CASES)
def test_random_positions_change_training_only(family, kind, scheme, universal):
    changes = {"positional.kind": kind, "positional.max_len": 24}
    if universal:
        changes["universal.enabled"] = True
    plain = tiny_model(family, changes)
    shifted = plain.override({"positional.train_positions": scheme})
    ids = _batch()
    args = (ids, ids) if family == "encoder_decoder" else (ids,)
    variables = MODULES[family](plain).init(jax.random.PRNGKey(0), *args)
    # Evaluation uses plain positions: the option leaves the model's function unchanged there.
    np.testing.assert_array_equal(
        _apply(shifted, variables, ids, train=False), _apply(plain, variables, ids, train=False)
    )
    train_plain = _apply(plain, variables, ids, train=True)
    first = _apply(shifted, variables, ids, train=True, seed=0)
    assert not np.allclose(first, train_plain, atol=1e-4)  # dropout is 0: positions differ
    np.testing.assert_array_equal(first, _apply(shifted, variables, ids, train=True, seed=0))
    assert not np.allclose(first, _apply(shifted, variables, ids, train=True, seed=1), atol=1e-4)


def test_given_positions_with_random_training_positions_raise():
    config = tiny_model("decoder_only", {"positional.train_positions": "offset"})
    ids = _batch()[:, :4]
    module = build_model(config)
    variables = module.init(jax.random.PRNGKey(0), ids)
    with pytest.raises(ValueError, match="cannot serve inputs with given positions"):
        module.apply(
            variables,
            ids,
            positions_BT=jnp.zeros_like(ids),
            train=True,
            rngs={"positions": jax.random.PRNGKey(0)},
        )


@pytest.mark.parametrize("family", ["decoder_only", "encoder_decoder"])
def test_randomized_eval_positions_are_a_fixed_draw_of_the_training_scheme(family):
    changes = {"positional.max_len": 24, "positional.train_positions": "randomized"}
    plain_eval = tiny_model(family, changes)
    random_eval = plain_eval.override({"positional.eval_positions": "randomized"})
    ids = _batch()
    args = (ids, ids) if family == "encoder_decoder" else (ids,)
    variables = MODULES[family](plain_eval).init(jax.random.PRNGKey(0), *args)
    first = _apply(random_eval, variables, ids, train=False)
    np.testing.assert_array_equal(first, _apply(random_eval, variables, ids, train=False))
    assert not np.allclose(first, _apply(plain_eval, variables, ids, train=False), atol=1e-4)
    if family == "decoder_only":
        # The draw is training_positions' scheme from the fixed evaluation key of the stack.
        key = jax.random.fold_in(
            jax.random.PRNGKey(stack.EVAL_POSITIONS_SEED), zlib.crc32(b"decoder")
        )
        positions = training_positions("randomized", key, ids != 0, 24)
        module = MODULES[family](plain_eval)
        given = module.apply(variables, ids, positions_BT=positions, train=False)
        np.testing.assert_allclose(first, given, rtol=1e-6, atol=1e-6)
    # A "positions" rng, when the caller gives one, replaces the fixed key.
    module = MODULES[family](random_eval)
    drawn = module.apply(variables, *args, train=False, rngs={"positions": jax.random.PRNGKey(5)})
    assert not np.allclose(first, drawn, atol=1e-4)


def test_randomized_eval_positions_need_randomized_training_positions():
    with pytest.raises(ValueError, match="eval_positions='randomized'.*train_positions='plain'"):
        tiny_model("decoder_only", {"positional.eval_positions": "randomized"})
