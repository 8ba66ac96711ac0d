"""Evaluation and decoding programs compiled while training runs, not after it.

The first evaluation of a run compiles its programs: the eval step once per batch shape of each
split, greedy decoding likewise. Compiled then, the run stops training to wait for them (the
quick reverse run on 2 CPU cores: eval 2.5 s and decode 3.1 s, most of it compiling, against
5.1 s of training). Once the train step has compiled, `CompileAhead` compiles them on a
background thread from the run's state and the first evaluation batch of each shape, while the
loop trains; the first evaluation waits for the thread (timed as "compile") and finds them
compiled: `jax.jit(f).lower(*args).compile()` fills the cache that `f(*args)` reads. The
programs are those the evaluation would have compiled, so no result changes.

An evaluator takes part by a method `ahead()`: the (function, batch) pairs its evaluations
call, one batch per shape, each function a parallel.EvalFn (`compile_args`, `compile`). A
seed group's vmapped evaluation (train/group_eval.py) has none and compiles when first used.
JAX settings made with a context manager (`with jax.numpy_rank_promotion(...)`) hold for the
thread they are entered on only: a program compiled ahead under other settings is not the one
the evaluation asks for, which then compiles its own (the time is lost, never the result); set
them with jax.config.update instead.
"""

import threading
import time
from collections.abc import Sequence

import jax
import numpy as np

from transformer_jax.train.parallel import EvalFn


def one_batch_per_shape(batches: Sequence) -> list:
    """The first batch of each distinct (field, shape, dtype) signature, in order."""
    found = {}
    for batch in batches:
        leaves = jax.tree_util.tree_leaves_with_path(batch)
        key = tuple((jax.tree_util.keystr(p), np.shape(x), np.result_type(x)) for p, x in leaves)
        found.setdefault(key, batch)
    return list(found.values())


def pairs(fn, eval_sets: dict) -> list:
    """An evaluator's `ahead()`: `fn` with one batch of each shape of every split, where `fn`
    can compile ahead; none for a seed group's lane function."""
    if not isinstance(fn, EvalFn):
        return []
    return [(fn, batch) for batches in eval_sets.values() for batch in one_batch_per_shape(batches)]


class CompileAhead:
    """Compiles every (function, batch) of `runs`' evaluators for its run's state on a thread."""

    def __init__(self, runs, program):
        tasks, seen = [], set()
        for run in runs:
            if run.ended is not None:  # held in its lane, or ended at its first step
                continue
            for item in run.evaluators:
                for fn, batch in getattr(item.evaluator, "ahead", list)():
                    key = (id(fn), id(batch))  # shared functions compile once per batch
                    if key not in seen:
                        seen.add(key)
                        tasks.append((fn, fn.compile_args(program.state(run.lane), batch)))
        self._tasks = tasks
        self.done_at: float | None = None  # time.perf_counter() when the thread ended
        self._thread = threading.Thread(target=self._compile, name="compile_ahead", daemon=True)
        self._thread.start()

    def _compile(self) -> None:
        try:
            for fn, args in self._tasks:
                fn.compile(args)
        except Exception:  # noqa: BLE001
            # Only ahead of time: the evaluation compiles the program again and raises the
            # error where it belongs, in the loop.
            pass
        finally:
            self.done_at = time.perf_counter()

    def ran_since(self, start: float) -> bool:
        """Whether the thread compiled after `start` (a time.perf_counter()): training then
        shared the machine with it, so that window's speed is no rate."""
        return self.done_at is None or self.done_at > start

    def wait(self, phases) -> None:
        """Blocks until every program is compiled (at once after the first time)."""
        if self._thread.is_alive():
            with phases("compile"):
                self._thread.join()
