"""The sweep-directory contract: WORKDIR/sweep.json and the run directories
WORKDIR/<variant>/seed_<seed>/ (each one per transformer_jax/run_dir.py), and reading them.

sweep.json holds the resolved sweep and the history of its launches (`update_sweep_json`, the one
writer); the run directories are written by the trainer and the launchers. This module sits
below both the sweep package (which launches runs and records them) and the report (which reads
them). Apart from update_sweep_json everything here only reads files, so a report can be
regenerated at any time, including while a sweep is still running.
"""

import contextlib
import csv
import dataclasses
import json
import math
import os
import shutil
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from transformer_jax.commands import launch_dir
from transformer_jax.run_dir import (
    FAILURE_FILE,
    FINAL_STATUSES,
    GIT_COMMIT_KEY,
    METRICS_FILE,
    METRICS_LINE_KEYS,
    check_metrics,
    code_label,
    read_code,
    read_config,
    read_json,
    read_json_object,
    read_summary,
    seed_dir,
    write_bytes,
    write_json,
)

SWEEP_FILE = "sweep.json"

RunStatus = Literal["finished", "diverged", "failed", "incomplete", "missing"]
# finished / diverged: summary.json says so (final; a rerun would give the same result).
# failed: no summary.json but failure.json (the trainer exited non-zero, or exited 0 without
#   writing its summary).
# incomplete: the run directory exists without either (interrupted, or running right now).
# missing: no run directory (never started).
DONE_STATUSES: tuple[RunStatus, ...] = FINAL_STATUSES


def run_dir(workdir: str, variant: str, seed: int) -> str:
    """Directory of one (variant, seed) run inside a sweep's workdir."""
    return seed_dir(os.path.join(workdir, variant), seed)


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
    # The code version(s) it trained at, space-separated in launch order: from the sweep's
    # code.json ("<commit>" or "<commit>+diff:<sha256>", run_dir.code_label), else config.json's
    # commit (the trainer's, "-dirty" after any uncommitted change).
    git_commit: str | None = None

    @property
    def code_versions(self) -> tuple[str, ...]:
        return tuple(self.git_commit.split()) if self.git_commit else ()

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
    summary = read_summary(path)
    failure = read_json(os.path.join(path, FAILURE_FILE))
    config = read_config(path)
    git_commit = config.get(GIT_COMMIT_KEY) if config is not None else None
    launches = read_code(path)
    if launches:
        git_commit = " ".join(dict.fromkeys(code_label(v) for v in launches))
    if summary is not None and summary.status in DONE_STATUSES:
        check_metrics(path)  # the lines the summary closed, as they were written
        return RunRecord(
            variant=variant,
            seed=seed,
            path=path,
            status=summary.status,
            step=summary.step,
            metrics=summary.metrics,
            num_params=summary.num_params,
            tokens_per_sec=summary.tokens_per_sec,
            wall_time_s=summary.wall_time_s,
            error=summary.error,
            failure=failure,
            git_commit=git_commit,
        )
    status: RunStatus = "failed" if failure is not None else "incomplete"
    error = failure.get("error") if isinstance(failure, dict) else None
    return RunRecord(
        variant, seed, path, status, failure=failure, error=error, git_commit=git_commit
    )


def _metrics_lines(path: str) -> Iterator[dict[str, Any]]:
    """The lines of a run's metrics.jsonl (none without the file); lines that do not parse (a
    run killed mid-write) are skipped."""
    try:
        with open(os.path.join(path, METRICS_FILE)) as f:
            for line in f:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict):
                    yield event
    except FileNotFoundError:
        return


def read_curve(path: str, split: str, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric of one split from a run's metrics.jsonl, in step order.

    Non-finite values are kept (a diverging run's last loss is inf/NaN) so callers decide; lines
    that do not parse (a run killed mid-write) are skipped. A step logged twice (a run resumed
    from an earlier checkpoint) keeps its last value.
    """
    by_step: dict[int, float] = {}
    for event in _metrics_lines(path):
        if event.get("split") != split or metric not in event or "step" not in event:
            continue
        value = event[metric]
        by_step[int(event["step"])] = math.nan if value is None else float(value)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def read_curve_tags(path: str) -> set[str]:
    """Every "split/metric" a run's metrics.jsonl logs (none without the file)."""
    tags = set()
    for event in _metrics_lines(path):
        if "split" in event:
            tags.update(f"{event['split']}/{k}" for k in event if k not in METRICS_LINE_KEYS)
    return tags


# Columns of runs.csv (report/tables.py runs_csv) before and after the metric columns.
RUNS_CSV_LEADING = ("variant", "seed", "status", "step")
RUNS_CSV_TRAILING = ("num_params", "tokens_per_sec", "wall_time_s", "git_commit", "error")


def read_runs_csv(path: str, workdir: str) -> dict[tuple[str, int], RunRecord]:
    """(variant, seed) -> RunRecord from a sweep's runs.csv, for a report without run directories.

    A committed results/ folder holds the report and runs.csv, not the run directories; this
    reads back what runs_csv wrote (every metric column, status, cost, commit, error), so the
    report can be rebuilt, e.g. with a new analysis. Records point at WORKDIR/<variant>/seed_<s>
    like read_run's, but nothing there is read: no learning curves, no failure details.
    """
    if not os.path.isfile(path):
        raise ValueError(f"runs csv {path!r} does not exist")
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if (
            header is None
            or tuple(header[: len(RUNS_CSV_LEADING)]) != RUNS_CSV_LEADING
            or tuple(header[-len(RUNS_CSV_TRAILING) :]) != RUNS_CSV_TRAILING
        ):
            raise ValueError(
                f"{path!r} is not a sweep's runs.csv: its header must start with "
                f"{','.join(RUNS_CSV_LEADING)} and end with {','.join(RUNS_CSV_TRAILING)}"
            )
        metric_names = header[len(RUNS_CSV_LEADING) : -len(RUNS_CSV_TRAILING)]
        records: dict[tuple[str, int], RunRecord] = {}
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
            values = dict(zip(header, row, strict=True))
            status = values["status"]
            if status not in ("finished", "diverged", "failed", "incomplete", "missing"):
                raise ValueError(f"{path}:{line}: unknown status {status!r}")

            def number(key, kind=float, values=values, line=line):
                """The field as `kind`, None when empty; a ValueError naming file, line, field."""
                if values[key] == "":
                    return None
                try:
                    return kind(values[key])
                except ValueError:
                    article = "an" if kind is int else "a"
                    kind_name = {int: "integer", float: "number"}[kind]
                    raise ValueError(
                        f"{path}:{line}: {key}={values[key]!r} is not {article} {kind_name}"
                    ) from None

            variant, seed = values["variant"], number("seed", int)
            if seed is None:
                raise ValueError(f"{path}:{line}: seed is empty; every row names its seed")
            metrics: dict[str, dict[str, float]] = {}
            for name in metric_names:
                if values[name] != "":
                    split, _, key = name.partition("/")
                    metrics.setdefault(split, {})[key] = number(name)

            if (variant, seed) in records:
                raise ValueError(f"{path}:{line}: {variant} seed {seed} is listed twice")
            records[(variant, seed)] = RunRecord(
                variant=variant,
                seed=seed,
                path=run_dir(workdir, variant, seed),
                status=status,
                step=number("step", int),
                metrics=metrics,
                num_params=number("num_params", int),
                tokens_per_sec=number("tokens_per_sec"),
                wall_time_s=number("wall_time_s"),
                error=values["error"] or None,
                git_commit=values["git_commit"] or None,
            )
    if not records:
        # Read as every run missing, it would overwrite a report with an empty one.
        raise ValueError(
            f"{path} lists no runs (a header and no rows); nothing was written: give the "
            "runs.csv a sweep wrote"
        )
    return records


def read_sweep_json(workdir: str) -> dict[str, Any]:
    """WORKDIR/sweep.json; a ValueError naming the workdir if there is none."""
    path = os.path.join(workdir, SWEEP_FILE)
    if not os.path.isfile(path):
        raise ValueError(
            f"workdir {workdir!r} has no {SWEEP_FILE}: it is not a sweep directory (the runner "
            "writes sweep.json when a sweep starts)"
        )
    return read_json_object(path, "the sweep's record", "use a new --workdir")


# The fields of a resolved sweep that define its runs: a sweep differing from the one recorded
# in sweep.json in any of them is another sweep. The others (metrics, baseline, description,
# equivalence margins) only change what the report reads, and may change.
RUN_FIELDS = (
    "config",
    "config_arg",
    "variants",
    "seeds",
    "factors",
    "cells",
    "nuisance",
    "nuisance_default",
    "select_on",
    "select_mode",
    "select_per",
    "confirm_seeds",
)
REPLACED_DIR = "replaced"  # WORKDIR/replaced/<n>/: the records of a sweep --replace replaced


def another_sweep(previous: Mapping[str, Any], sweep: Mapping[str, Any]) -> list[str]:
    """The RUN_FIELDS in which `sweep` (a Sweep's to_dict()) differs from `previous` (a
    sweep.json), compared as JSON."""

    def value(record, field):
        return json.dumps(record.get(field), sort_keys=True)

    return [f for f in RUN_FIELDS if value(previous, f) != value(sweep, f)]


def replaced_line(path: str, kept: str) -> str:
    return f"sweep: another sweep replaces {path}; its records are kept in {kept}"


def keep_replaced(workdir: str) -> str:
    """Copies sweep.json and the report's files (every file at the top of the workdir) into a
    new WORKDIR/replaced/<n>/, before another sweep's definition replaces them; returns it."""
    parent = os.path.join(workdir, REPLACED_DIR)
    os.makedirs(parent, exist_ok=True)
    number = 1 + max((int(n) for n in os.listdir(parent) if n.isdigit()), default=0)
    kept = os.path.join(parent, str(number))
    os.makedirs(kept)
    for name in sorted(os.listdir(workdir)):
        source = os.path.join(workdir, name)
        if not name.startswith(".") and os.path.isfile(source):
            shutil.copy2(source, os.path.join(kept, name))
    return kept


@contextlib.contextmanager
def restored_on_refusal(workdir: str) -> Iterator[list[str]]:
    """Puts sweep.json back as it was, and removes the WORKDIR/replaced/<n>/ made meanwhile,
    when the block raises a ValueError: `--report_only --sweep` records the new definition
    (`update_sweep_json`) before the report reads the runs, and a report refused then (a run's
    damaged record, fewer runs than its runs.csv) must leave the workdir as it found it.
    Yields a list that holds, once the block has succeeded, the replaced/<n>/ it made."""
    path = os.path.join(workdir, SWEEP_FILE)
    with open(path, "rb") as f:
        before = f.read()
    parent = os.path.join(workdir, REPLACED_DIR)
    kept = set(os.listdir(parent)) if os.path.isdir(parent) else None
    made: list[str] = []
    try:
        yield made
    except ValueError:
        write_bytes(path, before)
        if os.path.isdir(parent):
            for name in set(os.listdir(parent)) - (kept or set()):
                shutil.rmtree(os.path.join(parent, name))
            if kept is None:
                os.rmdir(parent)
        raise
    if os.path.isdir(parent):
        made += [os.path.join(parent, n) for n in sorted(set(os.listdir(parent)) - (kept or set()))]


def update_sweep_json(
    workdir: str,
    sweep: Mapping[str, Any],
    sweep_file: str,
    config_spec: str,
    quick: bool,
    main_module: str,
    invocation: Mapping[str, Any] | None = None,
    *,
    replace: bool = False,
    announce: bool = True,
) -> dict[str, Any]:
    """Writes WORKDIR/sweep.json: the resolved sweep (`sweep`, a Sweep's to_dict()) plus the
    history of launches, `invocation` appended to it (None: a report-only update).

    Raises ValueError, writing nothing, if the workdir holds a sweep of another config spec,
    or one whose runs are defined otherwise (`another_sweep`) unless `replace`: then the old
    sweep.json and report are first copied into WORKDIR/replaced/<n>/ (`keep_replaced`), which
    a line on stdout says unless not `announce` (the caller says it once its work is done)."""
    path = os.path.join(workdir, SWEEP_FILE)
    previous: dict[str, Any] = {}
    if os.path.isfile(path):
        previous = read_json_object(path, "the sweep's record", "use a new --workdir")
        if (previous.get("config_spec"), previous.get("config")) not in (
            (None, None),
            (config_spec, sweep["config"]),
        ):
            raise ValueError(
                f"workdir {workdir} holds a sweep run with --config={previous['config_spec']}, "
                f"not {config_spec} (--quick changes it); use a new --workdir"
            )
        differs = another_sweep(previous, sweep)
        if differs and not replace:
            raise ValueError(
                f"workdir {workdir} holds another sweep ({previous.get('file')}; its "
                f"{', '.join(differs)} differ from {sweep_file}'s); use a new --workdir, or "
                f"--replace to record this one there (the old sweep.json and report are kept "
                f"in {os.path.join(workdir, REPLACED_DIR)}/)"
            )
        if differs:
            kept = keep_replaced(workdir)
            if announce:
                print(replaced_line(path, kept))
    resolved = {
        "file": sweep_file,
        **sweep,
        "config_spec": config_spec,
        "quick": quick,
        "main_module": main_module,
        # A report-only update (no invocation) keeps the directory the runs were launched from.
        # Recorded relative to the repository when inside it ("." for its root): see commands.
        "cwd": previous.get("cwd", launch_dir()) if invocation is None else launch_dir(),
        "invocations": list(previous.get("invocations", [])),
    }
    if invocation is not None:
        resolved["invocations"].append(dict(invocation))
    os.makedirs(workdir, exist_ok=True)
    write_json(path, resolved)
    return resolved
