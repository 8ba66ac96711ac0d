"""Reading run directories (layout in notes/contract.md) and classifying each run's status.

A sweep lays its runs out as WORKDIR/<variant>/seed_<seed>/. Each run directory holds what the
trainer writes (config.json, metrics.jsonl, summary.json) plus what the sweep runner adds
(command.txt, run.log and, after a failure, failure.json). Everything here only reads files, so a
report can be regenerated at any time, including while a sweep is still running.
"""

import dataclasses
import json
import math
import os
from typing import Any, Literal

RunStatus = Literal["finished", "diverged", "failed", "incomplete", "missing"]
# finished / diverged: summary.json says so (final; a rerun would give the same result).
# failed: no summary.json but failure.json (the trainer exited non-zero, or exited 0 without
#   writing its summary).
# incomplete: the run directory exists without either (interrupted, or running right now).
# missing: no run directory (never started).
DONE_STATUSES: tuple[RunStatus, ...] = ("finished", "diverged")

SUMMARY_FILE = "summary.json"
FAILURE_FILE = "failure.json"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
COMMAND_FILE = "command.txt"
LOG_FILE = "run.log"


def run_dir(workdir: str, variant: str, seed: int) -> str:
    """Directory of one (variant, seed) run inside a sweep's workdir."""
    return os.path.join(workdir, variant, f"seed_{seed}")


def _read_json(path: str) -> Any | None:
    """Parsed JSON, or None when the file is absent or half-written (a run killed mid-write)."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return None


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a run directory says about one (variant, seed) run.

    metrics: split -> metric -> value, from summary.json (empty without one).
    failure: failure.json contents (returncode, stderr_tail, ...) or None.
    """

    variant: str
    seed: int
    path: str
    status: RunStatus
    step: int | None = None
    metrics: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    num_params: int | None = None
    tokens_per_sec: float | None = None
    wall_time_s: float | None = None
    error: str | None = None
    failure: dict[str, Any] | None = None
    git_commit: str | None = None

    def metric(self, name: str) -> float | None:
        """Value of "split/metric" (split before the first slash), or None if absent."""
        split, _, key = name.partition("/")
        value = self.metrics.get(split, {}).get(key)
        return None if value is None else float(value)


def read_run(workdir: str, variant: str, seed: int) -> RunRecord:
    """Reads and classifies the run directory of (variant, seed)."""
    path = run_dir(workdir, variant, seed)
    if not os.path.isdir(path):
        return RunRecord(variant, seed, path, "missing")
    summary = _read_json(os.path.join(path, SUMMARY_FILE))
    failure = _read_json(os.path.join(path, FAILURE_FILE))
    config = _read_json(os.path.join(path, CONFIG_FILE))
    git_commit = config.get("git_commit") if isinstance(config, dict) else None
    if isinstance(summary, dict) and summary.get("status") in DONE_STATUSES:
        return RunRecord(
            variant=variant,
            seed=seed,
            path=path,
            status=summary["status"],
            step=summary.get("step"),
            metrics=summary.get("metrics") or {},
            num_params=summary.get("num_params"),
            tokens_per_sec=summary.get("tokens_per_sec"),
            wall_time_s=summary.get("wall_time_s"),
            error=summary.get("error"),
            failure=failure,
            git_commit=git_commit,
        )
    status: RunStatus = "failed" if failure is not None else "incomplete"
    error = failure.get("error") if isinstance(failure, dict) else None
    return RunRecord(
        variant, seed, path, status, failure=failure, error=error, git_commit=git_commit
    )


def read_curve(path: str, split: str, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric of one split from a run's metrics.jsonl, in step order.

    Non-finite values are kept (a diverging run's last loss is inf/NaN) so callers decide; lines
    that do not parse (a run killed mid-write) are skipped. A step logged twice (a run resumed
    from an earlier checkpoint) keeps its last value.
    """
    by_step: dict[int, float] = {}
    try:
        with open(os.path.join(path, METRICS_FILE)) as f:
            for line in f:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if event.get("split") != split or metric not in event or "step" not in event:
                    continue
                value = event[metric]
                by_step[int(event["step"])] = math.nan if value is None else float(value)
    except FileNotFoundError:
        return [], []
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]
