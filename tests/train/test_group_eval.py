"""A group's evaluation (train/group_eval.py): one vmapped eval step over the stacked states,
each lane equal to its member's own evaluation (to rounding: test_seed_group.py's tolerance)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.group_eval import GroupEval
from transformer_jax.train.seed_group import stack, unstack

RTOL = 2.5e-6  # test_seed_group.py's


def _batches() -> list[dict]:
    out = []
    for seed in range(3):
        ids_BT = jax.random.randint(jax.random.PRNGKey(seed), (4, 7), 3, 13)
        weights = jnp.asarray([1, 1, 1, seed != 2], jnp.float32)  # a padding row in the last
        out.append({"inputs": ids_BT, "targets": ids_BT, "example_weights": weights})
    return out


class _Program:
    """A group's program as GroupEval reads it, counting how often its states are read."""

    def __init__(self, states):
        self._states, self.version, self.reads = states, 0, 0

    @property
    def stacked_states(self):
        self.reads += 1
        return self._states


@pytest.mark.parametrize(
    "family", ["encoder_decoder", pytest.param("decoder_only", marks=pytest.mark.slow)]
)
def test_each_lane_of_the_vmapped_evaluation_equals_its_members_own(family):
    model = build_model(tiny_model(family, {"positional.eval_positions": "plain"}))
    batches = _batches()
    init = steps.make_init(model, optimizer=_NoOptimizer(), batch=batches[0])
    members = [init(jax.random.PRNGKey(seed)) for seed in (0, 3, 7)]
    program = _Program(stack(members))
    group = GroupEval()
    group.attach(program)
    eval_step = functools.partial(steps.eval_step, model=model, diagnostics=False)
    solo = jax.jit(eval_step)
    for lane, member in enumerate(members):
        lane_fn = group.lane_fn("eval_step", eval_step, lane)
        for batch in batches:
            ours, theirs = jax.device_get((lane_fn(member, batch), solo(member, batch)))
            for name in theirs:
                np.testing.assert_allclose(ours[name], theirs[name], rtol=RTOL, err_msg=name)
    # One vmapped call per batch for every member, one compiled program.
    assert program.reads == len(batches)
    assert group._fns["eval_step"]._cache_size() == 1
    # A step changes the states: the next evaluation reads them afresh.
    program.version += 1
    program._states = stack([unstack(program._states, 1)] * 3)
    lane_0 = group.lane_fn("eval_step", eval_step, 0)(members[0], batches[0])
    np.testing.assert_allclose(
        lane_0["loss"], jax.device_get(solo(members[1], batches[0]))["loss"], rtol=RTOL
    )


class _NoOptimizer:
    """The evaluation reads no optimizer state."""

    def init(self, params):
        return ()
