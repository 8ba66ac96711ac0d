"""Metrics to DIR/metrics.jsonl, TensorBoard (tensorboardX) and a console progress line.

`metrics.jsonl` holds one JSON object per `write`: `{"step", "split", "time", <metric>:
float, ...}` (see the run-directory contract). Lines are flushed as written, so a crash
loses nothing already logged. Non-finite values are written as Python's `NaN` /
`Infinity` tokens (read back by `json.loads`), so a diverged run's last loss is visible.

Resuming: `truncate_after(step)` drops lines logged after the restored checkpoint by the
crashed run (`truncate_after(0)`: all of them, when it was killed before its first checkpoint),
so the resumed file matches an uninterrupted run's (apart from "time"), and TensorBoard is told
to purge those steps too.

Given the run's resolved `config`, the logger also drives the run's tracking (tracking/run.py):
its TensorBoard HParams session and, with train.wandb_project, its W&B run, which get every
metrics line and, through `write_summary`, the summary.
"""

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import numpy as np

from transformer_jax.run_dir import (
    METRICS_FILE,
    METRICS_LINE_KEYS,
    RunSummary,
    write_summary,
    write_text,
)
from transformer_jax.tracking.run import RunTracking
from transformer_jax.train.event_file import EventFile

_RESERVED = METRICS_LINE_KEYS


def _to_float(name: str, value: Any) -> float:
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "biuf":
        raise ValueError(
            f"metric {name!r} must be a numeric scalar, got {type(value).__name__} "
            f"with shape {array.shape} and dtype {array.dtype}"
        )
    return float(array.reshape(()))


def _format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class StepClock:
    """When each train step was first logged. The runs of a group train as one program, with a
    logger each, and log a step one after another: sharing its time here, each reports the
    group's steps/s rather than the gaps between the loggers' writes."""

    def __init__(self):
        self._times: dict[int, float] = {}

    def time(self, step: int, now: float) -> float:
        """The time `step` was first logged (`now` for the first logger to log it)."""
        first = self._times.setdefault(step, now)
        if len(self._times) > 8:  # only the latest steps are asked for again
            del self._times[min(self._times)]
        return first


class MetricsLogger:
    """Appends metrics to `workdir/metrics.jsonl`, TensorBoard and the console.

    `total_steps` is used for the progress line's percentage and ETA. The console line
    (train split) shows step/total, steps/s since the previous train write, ETA and the
    loss; on a TTY it is redrawn in place with `\\r`, otherwise (CI, log files) it is
    printed as a plain line at most every `console_every_s` seconds (and at the last
    step). Other splits (eval) always print one plain line.

    `writes=False` (every process of a multi-process run but the first): neither reads nor
    writes any file, nor prints; `elapsed` still counts.

    `config`: the run's resolved config (config.json's); with it, the logger drives the run's
    HParams session and W&B run (tracking/run.py).

    `clock`: the StepClock shared by the loggers of a group's runs (None: this logger's own).
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        total_steps: int,
        stream: TextIO | None = None,
        console_every_s: float = 30.0,
        label: str = "",
        writes: bool = True,
        config: Mapping[str, Any] | None = None,
        clock: StepClock | None = None,
    ):
        self.writes = writes
        self._clock = StepClock() if clock is None else clock
        self.workdir = os.fspath(workdir)
        if writes:
            os.makedirs(self.workdir, exist_ok=True)
        self.path = os.path.join(self.workdir, METRICS_FILE)
        self.total_steps = total_steps
        self._stream = sys.stdout if stream is None else stream
        self._is_tty = self._stream.isatty()
        self._console_every_s = console_every_s
        self._label = f"{label} | " if label else ""
        self._start = time.monotonic()
        self._time_offset = 0.0
        # Opened lazily so `truncate_after` can run before anything is appended.
        self._file: TextIO | None = None
        self._writer: EventFile | None = None
        self._purge_step: int | None = None
        # metrics.jsonl's running SHA-256 and size, once `truncate_after` has read it (None:
        # unknown, `checksum` reads the file).
        self._digest: Any = None
        self._bytes = 0
        self._last_train: tuple[int, float] | None = None  # (step, monotonic time)
        self._last_console = -math.inf
        self._line_open = False  # a \r progress line is on screen without a newline
        self._tracking = RunTracking(self.workdir, config) if writes and config else None
        if self._tracking is not None:
            self._tracking.start()

    def truncate_after(self, step: int) -> int:
        """Drops metrics.jsonl lines with `"step" > step` (and unparsable partial lines).

        Call when resuming from the checkpoint at `step`, before the first `write`.
        "time" continues from the last kept line. Returns the number of lines dropped.
        """
        self._close_file()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._purge_step = step + 1
        self._digest, self._bytes = hashlib.sha256(), 0
        if not self.writes or not os.path.exists(self.path):
            return 0
        kept, dropped = [], 0
        with open(self.path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                    keep = record["step"] <= step
                except (json.JSONDecodeError, KeyError, TypeError):
                    keep = False  # e.g. a line cut short by the crash
                if not keep:
                    dropped += 1
                    continue
                kept.append(line.rstrip("\n"))
                self._time_offset = max(self._time_offset, record.get("time", 0.0))
        text = "".join(line + "\n" for line in kept)
        write_text(self.path, text)
        self._digest.update(text.encode())
        self._bytes = len(text.encode())
        self._start = time.monotonic()
        return dropped

    def checksum(self) -> dict[str, Any] | None:
        """metrics.jsonl as written so far: `{"bytes", "sha256"}` (run_dir.check_prefix); None
        for a logger that writes nothing."""
        if not self.writes:
            return None
        if self._digest is None:
            try:
                with open(self.path, "rb") as f:
                    content = f.read()
            except FileNotFoundError:
                content = b""
            return {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}
        return {"bytes": self._bytes, "sha256": self._digest.hexdigest()}

    def elapsed(self) -> float:
        """Seconds of training so far, over every process of a resumed run: the "time" the next
        line would get (a killed process counts up to its last kept line)."""
        return self._time_offset + time.monotonic() - self._start

    def write(self, step: int, split: str, metrics: Mapping[str, Any]) -> None:
        """Logs scalar `metrics` (floats, numpy or jax scalars) for `split` at `step`."""
        for name in _RESERVED:
            if name in metrics:
                raise ValueError(f"metric name {name!r} is reserved; reserved: {_RESERVED}")
        values = {name: _to_float(name, value) for name, value in metrics.items()}
        if not self.writes:
            return
        now = time.monotonic()
        record = {
            "step": int(step),
            "split": split,
            "time": self.elapsed(),
            **values,
        }
        try:
            if self._file is None:
                self._file = open(self.path, "a")  # noqa: SIM115 (lives until close())
            line = json.dumps(record) + "\n"
            self._file.write(line)
            self._file.flush()
            if self._digest is not None:
                self._digest.update(line.encode())
                self._bytes += len(line.encode())
        except OSError as error:  # a full disk: say which file (the OSError of a write does not)
            if error.filename is not None:
                raise
            raise OSError(error.errno, error.strerror, self.path) from error

        if self._writer is None:
            self._writer = EventFile(self.workdir, self._purge_step)
        for name, value in values.items():
            self._writer.add_scalar(f"{split}/{name}", value, int(step))
        if self._tracking is not None:
            self._tracking.log(int(step), split, values)

        self._console(int(step), split, values, now)

    def _console(self, step: int, split: str, values: dict[str, float], now: float) -> None:
        if split != "train":
            text = " ".join(f"{k}={v:.4g}" for k, v in values.items() if "/" not in k)
            self._print_line(f"{self._label}step {step} {split}: {text}")
            return
        now = self._clock.time(step, now)
        rate = None
        if self._last_train is not None and step > self._last_train[0]:
            rate = (step - self._last_train[0]) / max(now - self._last_train[1], 1e-9)
        self._last_train = (step, now)
        parts = [f"step {step}/{self.total_steps} ({100 * step / max(self.total_steps, 1):.0f}%)"]
        if rate is not None:
            eta = max(self.total_steps - step, 0) / rate
            parts += [f"{rate:.2f} steps/s", f"ETA {_format_duration(eta)}"]
        if "loss" in values:
            parts.append(f"loss {values['loss']:.4f}")
        line = self._label + " | ".join(parts)
        if self._is_tty:
            self._stream.write("\r" + line + "\x1b[K")
            self._stream.flush()
            self._line_open = True
        elif now - self._last_console >= self._console_every_s or step >= self.total_steps:
            self._print_line(line)
            self._last_console = now

    def _print_line(self, line: str) -> None:
        if self._line_open:
            self._stream.write("\n")
            self._line_open = False
        self._stream.write(line + "\n")
        self._stream.flush()

    def _close_file(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def _close_tracking(self) -> None:
        if self._tracking is not None:
            self._tracking.close()

    def write_summary(self, summary: RunSummary) -> None:
        """Writes summary.json, then ends the run's HParams session and W&B run with it."""
        if not self.writes:
            return
        write_summary(self.workdir, summary, metrics=self.checksum())
        if self._tracking is not None:
            self._tracking.end(summary)

    def close(self) -> None:
        """Flushes and closes metrics.jsonl, the TensorBoard writer and the run's tracking, each
        even if one before it fails. A failure to flush (a full disk) is raised, except while
        another error is on its way out (closing in a `finally`): that one says what went wrong
        first."""
        errors = []
        for close in (self._close_file, self._close_writer, self._close_tracking):
            try:
                close()
            except OSError as error:
                errors.append(error)
        if errors and sys.exc_info()[1] is None:
            raise errors[0]
        if self._line_open:
            self._stream.write("\n")
            self._stream.flush()
            self._line_open = False

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
