"""`RunHost`: the host side of one run (a solo run, or one seed of a seed group).

Everything about a run that lives on the host is here, written once for every way of running:
its directory and lock, its data iterator, the logging window and throughput, its evaluations,
checkpoints, early stopping and the summary. The training loop (train/loop.py) drives one
RunHost per run through `after_step`, `save` and `finish`; the device side (one state, or the
stacked states of a group) is the loop's `Program`.

A checkpoint also holds the run's loop state (`loop_state`): the partial logging window, its
elapsed time, the throughput of earlier windows, the early-stopping record and the curve
metrics' record (train/curve_metrics.py), so that however a run is interrupted, its resumed
metrics.jsonl equals an uninterrupted run's. In a multi-process run every process keeps a
RunHost and takes part in each checkpoint; process 0 alone (`primary`) writes the other files.
"""

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from transformer_jax import run_dir
from transformer_jax.data import tokenizers
from transformer_jax.train.checkpoint import Checkpointer, CheckpointSaveError
from transformer_jax.train.curve_metrics import CurveMetrics
from transformer_jax.train.early_stop import EarlyStopping
from transformer_jax.train.evaluators import evaluate
from transformer_jax.train.logger import MetricsLogger, StepClock
from transformer_jax.train.numerics import NonFiniteError, check_finite
from transformer_jax.train.optimizer import current_learning_rate
from transformer_jax.train.resume import resume_changes
from transformer_jax.train.timing import Phases


def window_to_json(window: list[dict]) -> dict:
    """The per-step metrics of a partial logging window, exactly (values with their dtypes),
    for the checkpoint: a resumed run completes the window as if it had never stopped."""
    if not window:
        return {}
    dtypes = {name: str(np.asarray(value).dtype) for name, value in window[0].items()}
    return {"dtypes": dtypes, "steps": [{k: v.item() for k, v in m.items()} for m in window]}


def window_from_json(stored: dict) -> list[dict]:
    dtypes = stored.get("dtypes", {})
    return [{k: np.asarray(v, dtypes[k]) for k, v in m.items()} for m in stored.get("steps", [])]


def train_line(window: list[dict], elapsed_s: float, opt_state) -> dict[str, float]:
    """The train line of metrics.jsonl for a logging window of per-step host metrics: their
    means, tokens/s and the learning rate."""
    out = {name: float(np.mean([m[name] for m in window])) for name in window[0]}
    out["tokens_per_sec"] = float(np.sum([m["tokens"] for m in window])) / elapsed_s
    del out["tokens"]
    out["learning_rate"] = float(current_learning_rate(opt_state))
    return out


@dataclasses.dataclass
class RunHost:
    """One run's host side; see the module docstring. `lane` is its index in the loop's
    program (0 for a solo run, the seed's position in a group)."""

    workdir: Path
    resolved: dict  # its config.json
    train_iter: Any
    train_cfg: Any  # TrainConfig
    phases: Phases  # the loop's, shared by the runs of a group
    lane: int = 0
    label: str = ""  # what tells this run apart on a group's shared console ("" alone)
    clock: StepClock | None = None  # shared by a group's loggers: one steps/s for all its runs
    primary: bool = True  # this process writes the run directory's files
    evaluators: list = dataclasses.field(default_factory=list)  # train/evaluators.py Scheduled
    num_params: int = 0
    step: int = 0
    checkpointer: Checkpointer | None = None
    logger: MetricsLogger | None = None
    early_stop: EarlyStopping | None = None
    curve: CurveMetrics = dataclasses.field(default_factory=CurveMetrics)
    # The logging window in progress: restored steps (host values) then this process's steps
    # (device metrics of the program, this run's lane read at the log).
    restored_window: list = dataclasses.field(default_factory=list)
    window: list = dataclasses.field(default_factory=list)
    window_start: float = 0.0
    rates: list = dataclasses.field(default_factory=list)  # tokens/s of non-compiling windows
    compiling: bool = True  # this process's first window includes compilation: not a rate
    ahead: Any = None  # the CompileAhead compiling its evaluations (train/compile_ahead.py)
    logged: bool = False  # the last step wrote a train line
    final_metrics: dict = dataclasses.field(default_factory=dict)
    final_evaluated: bool = False  # final_metrics come from a final evaluation
    _last_full: bool = True  # the last evaluation was by every evaluator
    ended: run_dir.RunSummary | None = None  # "finished", "diverged" or "failed"
    error: Exception | None = None  # what ended a "diverged" run
    _has_tokenizer: bool = False
    _changes: dict = dataclasses.field(default_factory=dict)
    _created: bool = False
    _last_batch: Any = None

    # --- Opening: claim the directory, check the resume, restore. ---

    def claim(self, closing: contextlib.ExitStack) -> None:
        """Creates the directory and takes its lock (primary), before anything in it is read:
        a second trainer started on it meanwhile is refused, never resumed on a config it did
        not check."""
        self._created = not self.workdir.exists()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.primary:
            closing.enter_context(contextlib.closing(run_dir.lock_run(self.workdir)))

    def unclaim(self) -> None:
        """Removes a directory `claim` created, after a check refused the run (it then holds
        only the lock file)."""
        if self._created and self.primary:
            (self.workdir / run_dir.LOCK_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.workdir.rmdir()

    def check_resume(self, tokenizer, *, hold_ended: bool = False) -> None:
        """Refuses (ValueError) data whose tokenizer is not the run's (the same ids would mean
        other text), then any config change a resume may not make, then a summary.json whose
        bytes are not those its checksums.json records, or that is damaged; reads, never
        writes.

        `hold_ended` (a member of a group): a run whose summary.json is final ("finished" or
        "diverged") and that the resume changes nothing in has ended; it is held (`held`):
        not opened, trained or written again, its summary as it was."""
        self._has_tokenizer = tokenizers.check_stored_tokenizer(self.workdir, tokenizer)
        self._changes = resume_changes(self.workdir, self.resolved)
        # Read by every resume, not only a group's: a summary edited, swapped with another
        # run's or cut short is refused by name, never overwritten by the re-evaluated one
        # (which would hide that the record was changed).
        summary = run_dir.read_summary(self.workdir)
        ended = summary is not None and summary.status in run_dir.FINAL_STATUSES
        if hold_ended and not self._changes and ended:
            self.ended = summary

    @property
    def held(self) -> bool:
        """Ended before this process opened it (`check_resume`'s `hold_ended`)."""
        return self.ended is not None and self.checkpointer is None

    def open(self, closing: contextlib.ExitStack, initial_state, tokenizer, num_params: int):
        """Opens the checkpoints and metrics and restores the latest checkpoint (parameters,
        optimizer, step, RNG, data position and loop state); returns the state to train from
        (`initial_state` when there is no checkpoint). Writes config.json (a fresh run) or
        records the accepted changes (a resume), and the tokenizer."""
        train_cfg, self.num_params = self.train_cfg, num_params
        every, keep = train_cfg.checkpoint_every, train_cfg.keep_checkpoints
        checkpointer = Checkpointer(
            self.workdir,
            every=every,
            keep=keep,
            fallback=train_cfg.restore_fallback,
            primary=self.primary,
        )
        self.checkpointer = closing.enter_context(checkpointer)
        self.logger = closing.enter_context(
            MetricsLogger(
                self.workdir,
                total_steps=train_cfg.steps,
                label=self.label,
                writes=self.primary,
                config=self.resolved,  # its HParams session and W&B run (tracking/run.py)
                clock=self.clock,
            )
        )
        with self.phases("checkpoint"):
            restored = self.checkpointer.restore(initial_state)
        loop = {}
        state = initial_state
        if restored is not None:
            state, data_state = restored
            self.step = int(state.step)
            self.train_iter.set_state(data_state)
            loop = self.checkpointer.restore_loop_state(self.step)
            if self.primary:  # metrics.jsonl as the checkpoint saw it, lines after it aside
                run_dir.check_prefix(self.workdir, run_dir.METRICS_FILE, loop.get("metrics"))
            self.logger.truncate_after(self.step)
            if self._changes and self.primary:
                run_dir.record_resume(self.workdir, self.step, self._changes)
            print(f"Resumed {run_dir.shown(self.workdir)} at step {self.step}.", flush=True)
        else:
            self.logger.truncate_after(0)  # Lines of a process killed before its first checkpoint.
            if self.primary:  # Nothing trained yet: this config is the run's.
                run_dir.write_config(self.workdir, self.resolved)
        if self.primary:  # What is kept of metrics.jsonl; it only grows from here.
            run_dir.record_checksum(self.workdir, run_dir.METRICS_FILE, self.logger.checksum())
        if tokenizer is not None and not self._has_tokenizer and self.primary:
            if restored is not None:
                print(
                    f"{self.workdir} stores no tokenizer (it predates them): storing the one "
                    f"rebuilt from {tokenizer.source}, assumed to be the one it trained with.",
                    flush=True,
                )
            tokenizers.write_tokenizer(tokenizer, self.workdir)
        self.restored_window = window_from_json(loop.get("window", {}))
        self.window_start = time.perf_counter() - loop.get("window_elapsed_s", 0.0)
        self.rates = list(loop.get("rates", []))
        self.curve = CurveMetrics.from_state(loop.get("curve", {}), train_cfg.loss_threshold)
        if train_cfg.early_stop_metric:
            self.early_stop = EarlyStopping.from_state(
                loop.get("early_stop", {}),
                metric=train_cfg.early_stop_metric,
                patience=train_cfg.early_stop_patience,
                min_delta=train_cfg.early_stop_min_delta,
                min_steps=train_cfg.early_stop_min_steps,
            )
        return state

    # --- Training: what the loop calls each step. ---

    @property
    def done(self) -> bool:
        """Trained all its steps, or stopped early: only `finish` is left."""
        stopped = self.early_stop is not None and self.early_stop.stopped
        return self.step >= self.train_cfg.steps or stopped

    def next_batch(self):
        """The run's next training batch; a run that has ended repeats its last one (its lane of
        a group's program keeps computing, unread, while the other runs train)."""
        if self.ended is None or self._last_batch is None:
            self._last_batch = next(self.train_iter)
        return self._last_batch

    def after_step(self, metrics, program) -> None:
        """Accounts for one dispatched step whose device metrics are `metrics` (the program's,
        all lanes): the train line at each log_every, the evaluators due at this step (each
        block's `every`, all of them at the end), early stopping, and `finish` at the end."""
        self.step += 1
        self.window.append(metrics)
        steps = self.train_cfg.steps
        self.logged = self.step % self.train_cfg.log_every == 0 or self.step == steps
        if self.logged:
            self._log(program)
            if self.ended is not None:  # diverged
                return
        last = self.step == steps
        due = [e for e in self.evaluators if e.due(self.step, last=last)]
        if due:
            results = self.evaluate(program.state(self.lane), final=last, scheduled=due)
            self.final_metrics = results
            self.curve.record(self.step, results)
            for split, values in results.items():
                self.logger.write(self.step, split, values)
            early_stop = self.early_stop
            # An evaluation by some evaluators only (their own cadences) counts for early
            # stopping when it holds the metric; one by all of them must hold it.
            reads = early_stop is not None and (self._last_full or early_stop.holds(results))
            if reads and early_stop.update(self.step, results):
                print(
                    f"Early stop of {run_dir.shown(self.workdir)} at step {self.step}: "
                    f"{self.early_stop.summary()['reason']}.",
                    flush=True,
                )
            self.window_start = time.perf_counter()  # The evaluation is not training time.
        if self.done:
            self.finish(program)

    def _log(self, program) -> None:
        # Dispatch is asynchronous: wait for the window's steps before reading the clock, or
        # the window's rate counts only their dispatch.
        jax.block_until_ready(self.window)
        elapsed = time.perf_counter() - self.window_start
        line = train_line(self._window_values(program), elapsed, program.opt_state(self.lane))
        self.logger.write(self.step, "train", line)  # A diverged window is logged too.
        try:
            check_finite(self.step, line)
        except NonFiniteError as error:
            self.error = error
            self._end(self._outcome("diverged", error=str(error)))
            return
        if not self.compiling and not (self.ahead and self.ahead.ran_since(self.window_start)):
            self.rates.append(line["tokens_per_sec"])
        self.restored_window, self.window, self.compiling = [], [], False
        self.window_start = time.perf_counter()

    def evaluate(self, state, *, final: bool, scheduled=None) -> dict[str, dict[str, float]]:
        """An evaluation of `state` by the evaluators `scheduled` (default: all of them)."""
        scheduled = self.evaluators if scheduled is None else scheduled
        self._last_full = len(scheduled) == len(self.evaluators)
        self.final_evaluated = final and self._last_full
        if self.ahead is not None:
            self.ahead.wait(self.phases)
        return evaluate(scheduled, state, final=final, phases=self.phases)

    def _window_values(self, program) -> list[dict]:
        """The window's per-step metrics on the host, this run's lane."""
        host = [program.lane(m, self.lane) for m in jax.device_get(self.window)]
        return self.restored_window + host

    def loop_state(self, program) -> dict:
        state = {
            "window": window_to_json(self._window_values(program)),
            "window_elapsed_s": time.perf_counter() - self.window_start,
            "rates": self.rates,
            "curve": self.curve.state(),
            # metrics.jsonl up to this save: a resume refuses one edited since (check_prefix).
            "metrics": self.logger.checksum(),
        }
        if self.early_stop is not None:
            state["early_stop"] = self.early_stop.summary()
        return state

    def save(self, program, *, force: bool) -> None:
        """Checkpoints the run when due (the checkpointer's cadence), or now with `force`, and
        then waits for it to be on disk. A save that fails ends the run "failed" and raises."""
        try:
            with self.phases("checkpoint"):
                self.checkpointer.save(
                    self.step,
                    program.host_state(self.lane),
                    self.train_iter.get_state(),
                    loop_state=self.loop_state(program),
                    force=force,
                )
                if force:
                    self.checkpointer.wait_until_finished()
        except CheckpointSaveError as error:
            self.fail(error)
            raise

    def fail(self, error: OSError) -> None:
        """Ends the run "failed" with `error` (a save or another write that could not be made),
        writing its summary if the disk takes it."""
        with contextlib.suppress(OSError):  # The full disk may not take the summary either.
            self._end(self._outcome("failed", error=str(error)))

    def finish(self, program) -> None:
        """The end of the run (all its steps, or an early stop): the last checkpoint, on disk
        before the summary says "finished"."""
        self.save(program, force=True)
        # Resumed at its end, the run evaluates the restored state; an early stop's last
        # evaluation was not the final one that an evaluator with `at_end` does more in, and
        # may have been by some evaluators only (their own cadences).
        rerun = not self.final_evaluated and (
            any(e.evaluator.at_end for e in self.evaluators) or not self._last_full
        )
        if not self.final_metrics or rerun:
            self.final_metrics = self.evaluate(program.state(self.lane), final=True)
            # The repeated evaluation was counted on the curve already (or, an early stop
            # rerun, the step's own one was): it adds no point to it.
            self.curve.annotate(self.final_metrics)
        extras = {}
        for item in self.evaluators:
            fields = item.evaluator.summary_fields()
            if fields:
                extras[item.name] = fields
        self._end(
            self._outcome(
                "finished",
                tokens_per_sec=float(np.median(self.rates)) if self.rates else None,
                early_stop=self.early_stop.summary() if self.early_stop is not None else None,
                extras=extras,
            )
        )

    def stopped(self) -> run_dir.RunSummary:
        """Its outcome when a signal stops the loop: its own end, or "stopped" (not written)."""
        return self.ended or self._outcome("stopped")

    def _outcome(self, status: run_dir.Status, **fields) -> run_dir.RunSummary:
        return run_dir.RunSummary(
            status=status,
            step=self.step,
            metrics=self.final_metrics,
            num_params=self.num_params,
            wall_time_s=self.logger.elapsed(),
            timing=self.phases.breakdown(),  # A group's, shared by its runs.
            **fields,
        )

    def _end(self, summary: run_dir.RunSummary) -> None:
        self.ended = summary
        self.logger.write_summary(summary)  # Process 0 writes it, and ends the run's tracking.
