"""Live progress of a sweep: one line per running run or group (step/total, loss, steps/s) read
from its first run's metrics.jsonl and config.json, and the sweep's ETA.

The ETA counts a launch (a run, or a group trained as one program) as one unit: its duration is
the mean wall time of the launches finished so far, and the remaining ones are scheduled on the
`parallel` slots as the runner does (each pending launch on the slot that frees first, a running
one freeing its slot after that mean less its elapsed time).

On a terminal the lines are redrawn in place; anywhere else (a notebook, a pipe, a log file) they
are printed as plain lines at most every `every_s` seconds, without terminal escapes.
"""

import heapq
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from transformer_jax.run_dir import CONFIG_FILE, METRICS_FILE

_TAIL_BYTES = 65536  # the last train lines of a metrics.jsonl (eval lines can be long)


def last_train(run_path: str) -> list[dict]:
    """The last two train records of `run_path`'s metrics.jsonl (fewer when it has fewer)."""
    try:
        with open(os.path.join(run_path, METRICS_FILE), "rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - _TAIL_BYTES, 0))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    records = []
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # cut by the tail or by a write in progress
        if isinstance(record, dict) and record.get("split") == "train":
            records.insert(0, record)
            if len(records) == 2:
                break
    return records


def total_steps(run_path: str) -> int | None:
    """train.steps of the run's config.json, None before the trainer wrote it."""
    try:
        with open(os.path.join(run_path, CONFIG_FILE)) as f:
            return int(json.load(f)["train"]["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def progress_line(name: str, run_path: str) -> str:
    """ "baseline/seed_{0,1,2}: step 120/400 (30%) | loss 1.234 | 4.10 steps/s" from its first
    run's files; "name: starting" before its first train line."""
    records = last_train(run_path)
    if not records:
        return f"{name}: starting"
    last = records[-1]
    total = total_steps(run_path)
    parts = [
        f"step {last['step']}/{total} ({100 * last['step'] / total:.0f}%)"
        if total
        else f"step {last['step']}"
    ]
    if isinstance(last.get("loss"), float):
        parts.append(f"loss {last['loss']:.4g}")
    if len(records) == 2:
        steps = last["step"] - records[0]["step"]
        seconds = last.get("time", 0.0) - records[0].get("time", 0.0)
        if steps > 0 and seconds > 0:
            parts.append(f"{steps / seconds:.2f} steps/s")
    return f"{name}: " + " | ".join(parts)


def eta(
    finished: Sequence[float], running: Sequence[float], pending: int, parallel: int
) -> float | None:
    """Seconds until the sweep ends: `finished` are the wall times of the launches done,
    `running` the elapsed times of those training, `pending` the number waiting; None before a
    launch has finished."""
    if not finished:
        return None
    unit = sum(finished) / len(finished)
    slots = [max(unit - elapsed, 0.0) for elapsed in running]
    slots += [0.0] * max(parallel - len(slots), 0)
    heapq.heapify(slots)
    for _ in range(pending):
        heapq.heappush(slots, heapq.heappop(slots) + unit)
    return max(slots, default=0.0)


class Display:
    """Shows `lines` on `stream`: redrawn in place on a terminal (at most every `tty_every_s`),
    printed as plain lines elsewhere (at most every `every_s`)."""

    def __init__(self, stream: TextIO | None = None, every_s: float = 30.0, tty_every_s=1.0):
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty()
        self.every_s = tty_every_s if self.tty else every_s
        self._last = -float("inf")
        self._drawn = 0  # lines on screen to redraw (a terminal)

    def show(self, lines: Sequence[str], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if now - self._last < self.every_s or not lines:
            return
        self._last = now
        if self.tty:
            self.clear()
            self.stream.write("".join(f"{line}\x1b[K\n" for line in lines))
            self._drawn = len(lines)
        else:
            self.stream.write("".join(f"{line}\n" for line in lines))
        self.stream.flush()

    def clear(self) -> None:
        """Erases the lines drawn on a terminal, so that a log line takes their place."""
        if self.tty and self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self.stream.flush()
        self._drawn = 0
