"""A group's teacher-forced evaluation as one vmapped program.

The runs of a seed or run group (train/seed_group.py) hold their train states stacked on one
leading axis. Evaluating them one after another would take each member out of the stack and
run the eval step once per member and batch; here `jax.vmap(eval_step)` reads the stacked
states directly, so each evaluation batch is one call for every member, compiled once per group.

The loop evaluates each run on its own cadence, in turn, after the step that every lane took
(train/loop.py). The first run that evaluates a batch after a step computes every lane's sums
for it; the others read their lane, until the next step changes the states. Lanes whose runs
have ended or do not evaluate at this step are computed too and not read: the cost of one
program for all. Members restored at different steps evaluate at different dispatches, each
from the states of its own.

Equality with the per-member evaluation: to rounding (the batched matmuls of vmap sum in another
order on XLA:CPU), the tolerance of tests/train/test_seed_group.py.
"""

from collections.abc import Callable
from typing import Any

import jax


class GroupEval:
    """The vmapped eval step of one group; `lane_fn(eval_step, lane)` gives a run its
    `(state, batch) -> sums` (the state argument is the run's own, read from the stack)."""

    def __init__(self):
        self._program = None
        self._fns: dict[Any, Callable] = {}
        self._cache: dict = {}  # (key, id(batch)) -> (batch, every lane's sums)
        self._version = None

    def attach(self, program) -> None:
        """The group's program (seed_group.GroupProgram): its `stacked_states` and `version`,
        which changes with every dispatched step."""
        self._program = program

    def lane_fn(self, key: str, eval_step: Callable, lane: int) -> Callable:
        """`eval_step(state, batch)`'s result for `lane`, from one vmapped call per batch shared
        by the group's runs; `key` names the eval step (its compiled program is the group's)."""
        if key not in self._fns:
            self._fns[key] = jax.jit(jax.vmap(eval_step, in_axes=(0, None)))
        vmapped = self._fns[key]

        def evaluate(state, batch):
            del state  # The lane of the stacked states is this run's.
            return jax.tree.map(lambda x: x[lane], self._sums(key, vmapped, batch))

        return evaluate

    def _sums(self, key: str, vmapped: Callable, batch):
        version = self._program.version
        if version != self._version:
            self._cache, self._version = {}, version
        cached = self._cache.get((key, id(batch)))
        if cached is None or cached[0] is not batch:  # The batch itself: its id is not reused.
            cached = (batch, vmapped(self._program.stacked_states, batch))
            self._cache[(key, id(batch))] = cached
        return cached[1]
