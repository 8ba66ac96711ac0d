"""Where a run's wall time goes: start-up, data, init, compile, train, eval, decode, checkpoint.

A run's fixed cost (everything but training) decides what a sweep of short runs costs, so every
run measures it: `Phases` times the named phases of the trainer, each phase exclusive of the
phases nested in it (decoding inside an evaluation counts as decode, not eval), and the rest of
the process's life as "other". The breakdown is printed at the end of a run and stored in
summary.json's `timing` (seconds, this process only: a resumed run's earlier processes are not
included).

Phases:
  startup     process start to the trainer's first line (Python, JAX and library imports)
  data        building or loading the dataset and its evaluation batches
  init        initial parameters and optimizer state (one small compiled program)
  compile     the first train step call, which traces and compiles it (its execution is
              asynchronous and lands in train)
  train       the training loop less everything below
  eval        evaluation (teacher-forced metrics, their compiles included)
  decode      greedy decoding and BLEU inside evaluations
  checkpoint  restore, saves and the final wait for them
  other       the rest: logging, summaries, closing

Beside the wall time, `cpu_seconds` holds the process's CPU time (every thread's) per closed
phase, exclusive in the same way: on a machine with few cores, host work in any thread (data
prefetch, logging) takes cores from the compiled step's threads, so what the loop costs is its
CPU time as well as its critical path (benchmarks/loop_cost.py reads it).
"""

import contextlib
import os
import time
from pathlib import Path

PHASES = ("startup", "data", "init", "compile", "train", "eval", "decode", "checkpoint")


def process_age_s() -> float | None:
    """Seconds since this process started, from Linux's /proc; None where that is unavailable."""
    try:
        # Field 22 of /proc/self/stat is the start time in clock ticks after boot; the fields
        # after the parenthesised command name start at field 3.
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return float(Path("/proc/uptime").read_text().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return None


class Phases:
    """Accumulates exclusive wall time per phase: `with phases("eval"): ...`."""

    def __init__(self):
        self._created = time.perf_counter()
        self._startup = process_age_s()
        self._seconds = dict.fromkeys(PHASES[1:], 0.0)
        self._cpu_seconds = dict.fromkeys(PHASES[1:], 0.0)
        # [phase, start, time in phases nested in it, CPU start, CPU time in nested phases] of
        # the phases entered
        self._open = []

    @contextlib.contextmanager
    def __call__(self, phase: str):
        if phase not in self._seconds:
            raise ValueError(f"phase={phase!r} is not a timed phase; valid: {PHASES[1:]}")
        start = time.perf_counter()
        self._open.append([phase, start, 0.0, time.process_time(), 0.0])
        try:
            yield
        finally:
            _, _, nested, cpu_start, cpu_nested = self._open.pop()
            elapsed = time.perf_counter() - start
            cpu_elapsed = time.process_time() - cpu_start
            self._seconds[phase] += elapsed - nested
            self._cpu_seconds[phase] += cpu_elapsed - cpu_nested
            if self._open:
                self._open[-1][2] += elapsed
                self._open[-1][4] += cpu_elapsed

    def cpu_seconds(self) -> dict[str, float]:
        """Process CPU seconds (all threads) per phase, exclusive as in `breakdown`; phases
        still open are not counted."""
        return dict(self._cpu_seconds)

    def breakdown(self) -> dict[str, float | None]:
        """Seconds per phase, other and total (startup included when known); phases still open
        (a run that stops inside its loop) count up to now."""
        now = time.perf_counter()
        timed = now - self._created
        seconds = dict(self._seconds)
        inner = 0.0  # the open phase nested in this one, innermost first
        for phase, start, nested, *_ in reversed(self._open):
            seconds[phase] += (now - start) - nested - inner
            inner = now - start
        out = {"startup": self._startup, **seconds}
        out["other"] = max(timed - sum(seconds.values()), 0.0)
        out["total"] = timed + (self._startup or 0.0)
        return {name: None if s is None else round(s, 3) for name, s in out.items()}


def breakdown_line(breakdown: dict[str, float | None]) -> str:
    """'time: 31.2 s = startup 4.1 + data 2.0 + ...', the phases that took any time."""
    shown = [
        f"{name} {seconds:.1f}"
        for name, seconds in breakdown.items()
        if name != "total" and seconds is not None and seconds >= 0.05
    ]
    return f"time: {breakdown['total']:.1f} s = " + " + ".join(shown)
