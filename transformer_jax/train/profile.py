"""A `jax.profiler` trace of a window of train steps (`train.profile_steps`), as MaxText
profiles from its config: where a step's time goes on the devices and the host.

`profile_steps=(start, stop)` traces the steps that take the step counter from `start` to `stop`
(the steps logged as start + 1 .. stop; `(0, n)` includes the first step's compilation). The trace
starts before the first of them is dispatched and stops once the last one's result is ready, or
when the loop ends inside the window (the run finished, early-stopped or diverged, a signal
stopped it, or an error), so a trace is always closed. It is written to RUN/profile/ (for a seed
group, its first seed's run directory: the group is one program); docs/speed.md says how to
read it.
"""

from pathlib import Path

import jax


class StepProfiler:
    """Starts and stops the trace around the step window; a context manager for the loop."""

    def __init__(self, steps: tuple[int, ...], log_dir: Path):
        self._start, self._stop = steps if steps else (0, 0)  # (0, 0): no step is in it
        self._log_dir = log_dir
        self._tracing = False
        self._traced = False  # one trace per process, even if the window comes round again

    def before_step(self, step: int) -> None:
        """Called before dispatching the step that takes the counter from `step` to step + 1."""
        if not self._traced and self._start <= step < self._stop:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(str(self._log_dir))
            self._tracing = self._traced = True

    def after_step(self, step: int, metrics) -> None:
        """Called once the step that took the counter to `step` is dispatched; `metrics` are its
        device outputs, waited for before the trace stops after the window's last step."""
        if self._tracing and step >= self._stop:
            jax.block_until_ready(metrics)
            self._end()

    def _end(self) -> None:
        self._tracing = False
        jax.profiler.stop_trace()

    def __enter__(self) -> "StepProfiler":
        return self

    def __exit__(self, *exc) -> None:
        if self._tracing:
            self._end()
