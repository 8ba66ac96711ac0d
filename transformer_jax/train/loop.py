"""The training loop, written once: a solo run is a group of one.

`train_runs(prepared, seeds, workdirs, make_program)` trains one run per (seed, workdir) pair.
The device side is a `Program`: one train state stepped by the compiled train step (a solo
run: train/trainer.py), or the seeds' states stacked and stepped by one vmapped step (a seed
group: train/seed_group.py). The host side of each run, its directory, logging window,
evaluations, checkpoints, early stopping and summary, is a `RunHost` (train/run_host.py).

Order of events: everything is validated before this (train/trainer.py `prepare`); each run
directory is created and locked before anything in it is read, then the resume is checked
(tokenizer, config), the program built, and every run restored from its own latest checkpoint;
then each step dispatches one step of every run still training, and each run logs, evaluates,
checkpoints and ends on its own cadence. A run ends when it has trained `train.steps`, stops
early (train/early_stop.py) or diverges; its lane of a group's program keeps computing, unread,
while the others train. Runs restored at different steps (a group killed between its seeds'
saves) each continue from their own step; a group's run that ended before this process (its
summary.json final) is held in its lane, untouched, so the group stays the program it was.

Signals: SIGTERM/SIGINT checkpoint every run still training and return "stopped" summaries. The
loop never runs more than MAX_STEPS_AHEAD steps ahead of the devices: JAX dispatch is
asynchronous, and a loop that queued steps up to its next logging step would make a signal
wait for all of them before the forced save. Blocking on the metrics of step t - k before
dispatching step t + 1 keeps k steps in flight, enough to hide the host's per-step work, so a
signal is honoured within about k step times plus one save at any log_every. In a
multi-process run a signal to any process stops all of them at the same step
(train/multihost.py).
"""

import collections
import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import jax

from transformer_jax import run_dir
from transformer_jax.train import init_from, multihost
from transformer_jax.train.compile_ahead import CompileAhead
from transformer_jax.train.evaluators import EvalContext, build_evaluators
from transformer_jax.train.group_eval import GroupEval
from transformer_jax.train.logger import StepClock
from transformer_jax.train.parallel import make_parallel
from transformer_jax.train.profile import StepProfiler
from transformer_jax.train.run_host import RunHost
from transformer_jax.train.signals import StopOnSignal
from transformer_jax.train.timing import Phases, breakdown_line

MAX_STEPS_AHEAD = 2  # steps dispatched beyond the last one known finished; see the docstring


class Program(Protocol):
    """The device side of the runs of a loop, run i in lane i."""

    num_params: int

    def initial_states(self) -> list:
        """Each run's initial state, placed as a solo run's: the restore targets."""

    def start(self, states: Sequence) -> None:
        """Puts each run's (restored or initial) state on the devices."""

    def step(self, batches: Sequence) -> Any:
        """Dispatches one train step of every lane on its batch; returns the device metrics."""

    def lane(self, metrics, i: int) -> dict:
        """Lane i of host (fetched) metrics."""

    def state(self, i: int):
        """Run i's train state, placed as a solo run's (for evaluation)."""

    def host_state(self, i: int):
        """Run i's train state as one logical copy (for checkpoints)."""

    def opt_state(self, i: int):
        """Run i's optimizer state (for the logged learning rate)."""


def train_runs(
    prepared,
    seeds: Sequence[int],
    workdirs: Sequence[Path],
    make_program: Callable[[Any, Sequence[int], Phases], Program],
    phases: Phases,
    *,
    raise_divergence: bool = False,
    resolved: Sequence[dict] | None = None,
) -> list[run_dir.RunSummary]:
    """Trains `prepared` (train/trainer.py `prepare`) once per seed in its workdir; returns each
    run's summary, in order: the one written to its summary.json, or a "stopped" one (not
    written) when a signal stopped the loop. `make_program(parallel, seeds, phases)` builds the
    device side. A checkpoint that cannot be saved raises CheckpointSaveError after writing the
    "failed" summary of every run still training (so does another write that fails, with its
    own error when no save failed); with `raise_divergence`, a diverged run raises its
    NonFiniteError after writing its "diverged" summary (a group trains on without the seed).
    `resolved`: each run's config.json when the runs differ in more than the seed (a run group's
    optimizer scalars); by default `prepared`'s with each run's seed."""
    train_cfg, info = prepared.train_cfg, prepared.info
    parallel = make_parallel(train_cfg)  # Train state on the devices; see train/parallel.py.
    shared = {}  # compiled evaluation functions the runs share
    # A group evaluates its stacked states vmapped (train/group_eval.py); a solo run its own.
    group = GroupEval() if len(workdirs) > 1 else None
    labels = _member_labels(workdirs)
    clock = StepClock()  # one program: every run's steps/s is the group's
    runs = []
    for lane, (seed, workdir) in enumerate(zip(seeds, workdirs, strict=True)):
        run = RunHost(
            workdir=Path(workdir).expanduser(),
            resolved=resolved[lane] if resolved else {**prepared.resolved, "seed": seed},
            train_iter=prepared.dataset.train_iterator(seed=seed, batch_size=prepared.batch_size),
            train_cfg=train_cfg,
            phases=phases,
            lane=lane,
            label=labels[lane],
            clock=clock,
            primary=multihost.is_primary(),  # see train/multihost.py
        )
        context = EvalContext(
            prepared,
            parallel,
            prepared.batch_size,
            run.workdir,
            phases,
            shared,
            group=group,
            lane=lane,
        )
        run.evaluators = build_evaluators(train_cfg, context)
        runs.append(run)

    # train.init_from is read (and refused) before any directory changes, and only where a run
    # has no checkpoint of its own: a resume restores that one instead.
    fresh = [run for run in runs if not run_dir.has_checkpoints(run.workdir)]
    source = None
    if train_cfg.init_from and fresh:
        source = init_from.load(train_cfg.init_from, prepared.model_config)

    # Everything is validated: only now do the run directories change. What is opened is closed
    # last to first when the loop returns or raises: each run's lock outlives its checkpointer's
    # final wait.
    with contextlib.ExitStack() as closing:
        try:
            for run in runs:
                run.claim(closing)
            for run in runs:
                run.check_resume(info.tokenizer, hold_ended=len(runs) > 1)
        except ValueError:  # Another trainer holds a directory, or a resume is refused.
            closing.close()
            for run in runs:
                run.unclaim()
            raise
        if all(run.held for run in runs):  # A group that ended before: nothing to build.
            for run in runs:
                print(f"{run_dir.shown(run.workdir)} ended before ({run.ended.status}).")
            return [run.ended for run in runs]
        program = make_program(parallel, seeds, phases)
        if group is not None:
            group.attach(program)
        # The placed states' shardings are the restore targets, so a checkpoint written on any
        # number of devices loads onto this run's devices.
        initial = program.initial_states()
        if source is not None:
            initial = [init_from.with_source(state, source) for state in initial]
            print(f"Parameters from {run_dir.shown(train_cfg.init_from)} (train.init_from).")
        # A member that ended before (`RunHost.check_resume`) keeps its lane, from its initial
        # state, unread: the group stays the program it was, and the others train in it as
        # they did before the interruption.
        states = [
            state if run.held else run.open(closing, state, info.tokenizer, program.num_params)
            for run, state in zip(runs, initial, strict=True)
        ]
        for run in runs:
            if run.held:
                print(
                    f"{run_dir.shown(run.workdir)} ended before ({run.ended.status} at step "
                    f"{run.ended.step}): kept in its lane of the group, not trained again.",
                    flush=True,
                )
        del initial
        program.start(states)
        del states
        groups = f" x {len(runs)} runs" if len(runs) > 1 else ""
        print(f"{prepared.model_config.family}: {program.num_params:,} parameters{groups}.")
        try:
            for run in runs:
                if not run.held and run.done:  # Restored at its end: the final evaluation.
                    run.finish(program)
            # One program, one trace: in the first run's directory (train/profile.py).
            profile_dir = runs[0].workdir / run_dir.PROFILE_DIR
            profiler = StepProfiler(train_cfg.profile_steps, profile_dir)
            summaries = _train(runs, program, phases, profiler)
        except OSError as error:  # A save that failed, or another write on the same full disk.
            cause = _failed(runs, error)
            if cause is error:
                raise
            raise cause from error
        diverged = [run.error for run in runs if run.error is not None]
        if raise_divergence and diverged:
            raise diverged[0]
        if any(summary.status != "stopped" for summary in summaries):
            print(breakdown_line(phases.breakdown()), flush=True)
        return summaries


def _member_labels(workdirs: Sequence) -> list[str]:
    """Each run's directory below the runs' common one ("seed_3", "learning_rate-0.002/seed_0"):
    the runs of a group print to one console, so each line says whose it is. A solo run's lines
    carry no label."""
    if len(workdirs) < 2:
        return [""] * len(workdirs)
    paths = [Path(workdir).expanduser().resolve() for workdir in workdirs]
    common = Path(os.path.commonpath(paths))
    return [str(path.relative_to(common)) for path in paths]


def _failed(runs: list[RunHost], error: OSError) -> OSError:
    """What a write that failed is reported as: the failed save of a run if there is one (on a
    full disk another write, metrics or a summary, may fail first), after every run still
    training ends "failed" with it."""
    saves = [run.checkpointer.failed_save() for run in runs if run.checkpointer is not None]
    cause = next((failed for failed in saves if failed is not None), error)
    for run in runs:
        if run.ended is None:
            run.fail(cause)
    return cause


def _train(
    runs: list[RunHost], program: Program, phases: Phases, profiler: StepProfiler
) -> list[run_dir.RunSummary]:
    """Steps every run until each has ended, or a signal stops them all."""
    in_flight = collections.deque()  # metrics of the dispatched steps not yet known finished
    compiled = False
    ahead = None  # the evaluations' programs, compiling while the loop trains
    try:
        with StopOnSignal() as stop, phases("train"), profiler:
            while active := [run for run in runs if run.ended is None]:
                batches = [run.next_batch() for run in runs]
                step = min(run.step for run in active)  # the counter this dispatch advances
                profiler.before_step(step)
                # The first call traces and compiles; its execution is asynchronous.
                with contextlib.nullcontext() if compiled else phases("compile"):
                    metrics = program.step(batches)
                if not compiled and runs[0].train_cfg.compile_ahead:
                    ahead = CompileAhead(active, program)
                    for run in active:
                        run.ahead = ahead
                compiled = True
                profiler.after_step(step + 1, metrics)
                in_flight.append(metrics)
                if len(in_flight) > MAX_STEPS_AHEAD:
                    jax.block_until_ready(in_flight.popleft())
                for run in active:
                    run.after_step(metrics, program)
                # A signal may reach one process only (a preempted host): all stop together.
                stopping = multihost.any_process(stop.stop_requested())
                for run in active:
                    # The checkpointer saves when due (on logging steps); a signal forces it.
                    if run.ended is None and (run.logged or stopping):
                        run.save(program, force=stopping)
                if stopping:
                    at = sorted({str(run.step) for run in active})
                    print(
                        f"Stopped by signal at step {', '.join(at)}; checkpoint saved.", flush=True
                    )
                    return [run.stopped() for run in runs]
        return [run.ended for run in runs]
    finally:
        # A thread still compiling when the process exits can crash it in XLA's teardown.
        if ahead is not None:
            ahead.wait(phases)
