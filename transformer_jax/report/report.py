"""Writes a sweep's report (report.md, results.csv, runs.csv, table.tex, plots) from its workdir.

Everything is derived from WORKDIR/sweep.json and the run directories, so the report can be
regenerated at any time (`python -m transformer_jax.sweep --workdir=DIR --report_only`), also
while runs are still going.
"""

import contextlib
import datetime
import json
import os
import re
from typing import Any

from transformer_jax.report import bleu_bootstrap, environment, plots, summary, tables
from transformer_jax.run_dir import git_commit, read_config
from transformer_jax.sweep.spec import Sweep, format_override

SWEEP_FILE = "sweep.json"
REPORT_FILE = "report.md"
RESULTS_CSV = "results.csv"
RUNS_CSV = "runs.csv"
TABLE_TEX = "table.tex"


def read_sweep_json(workdir: str) -> dict[str, Any]:
    path = os.path.join(workdir, SWEEP_FILE)
    if not os.path.isfile(path):
        raise ValueError(
            f"workdir {workdir!r} has no {SWEEP_FILE}: it is not a sweep directory (the runner "
            "writes sweep.json when a sweep starts)"
        )
    with open(path) as f:
        return json.load(f)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _remove_stale(workdir: str, fname: str) -> None:
    """Deletes a figure an earlier report wrote that this one has no data for."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(workdir, fname))


def _header(resolved: dict[str, Any], sweep: Sweep, rows, report_commit: str) -> list[str]:
    invocations = resolved.get("invocations") or [{}]
    last = invocations[-1]
    run_commits = sorted({r.git_commit for row in rows for r in row.runs if r.git_commit})
    name = os.path.splitext(os.path.basename(resolved.get("file", "sweep")))[0]
    lines = [
        f"# Sweep `{name}`",
        "",
        "> " + sweep.description.strip().replace("\n", "\n> "),
        "",
        f"- Sweep file: `{resolved.get('file', 'unknown')}`",
        f"- Base config: `{resolved.get('config_spec', sweep.config_spec)}`"
        + (" (quick: every run shrunk)" if resolved.get("quick") else ""),
        f"- Seeds: {', '.join(map(str, sweep.seeds))}; baseline: `{sweep.baseline}`",
        f"- Git commit (report): `{report_commit}`; runs trained at: "
        + (", ".join(f"`{c}`" for c in run_commits) or "unknown"),
        f"- Sweep started: {invocations[0].get('date', 'unknown')}; last launched: "
        f"{last.get('date', 'unknown')}; report written: "
        f"{datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- Machine: {environment.describe_machine(last.get('machine') or {})}",
        f"- Command: `{last.get('command', 'unknown')}`",
    ]
    if len(invocations) > 1:
        lines.append(f"- Earlier launches ({len(invocations) - 1}):")
        lines += [f"  - {i.get('date')}: `{i.get('command')}`" for i in invocations[:-1]]
    return lines


def _train_length(records) -> int | None:
    """The longest training sequence (data.max_len) of the first run that recorded its config,
    for the length plots; None when no run did or the dataset has no such field."""
    for record in records:
        config = read_config(record.path)
        if config and isinstance(config.get("data", {}).get("max_len"), int):
            return config["data"]["max_len"]
    return None


def write_report(workdir: str, digits: int = 3, confidence: float = 0.95) -> str:
    """Writes all report files into workdir and returns the path of report.md."""
    resolved = read_sweep_json(workdir)
    sweep = Sweep.from_dict(resolved)
    runs = summary.read_runs(sweep, workdir)
    rows = summary.summarize(sweep, runs, confidence)
    all_runs = [r for records in runs.values() for r in records]

    with open(os.path.join(workdir, RESULTS_CSV), "w") as f:
        f.write(tables.results_csv(rows, sweep.metrics))
    with open(os.path.join(workdir, RUNS_CSV), "w") as f:
        f.write(tables.runs_csv(all_runs, sweep.metrics))
    with open(os.path.join(workdir, TABLE_TEX), "w") as f:
        f.write(tables.latex_table(rows, sweep.metrics, digits, confidence))

    main = sweep.metrics[0]
    main_split, _, main_key = main.partition("/")
    figures = []
    for split, metric in (("train", "loss"), (main_split, main_key)):
        fname = f"curves_{_slug(split)}_{_slug(metric)}.png"
        if plots.plot_curves(runs, split, metric, os.path.join(workdir, fname), sweep.baseline):
            figures.append((f"{split}/{metric} vs step", fname))
        else:
            _remove_stale(workdir, fname)
    fname = f"bars_{_slug(main)}.png"
    if plots.plot_metric_bars(rows, main, os.path.join(workdir, fname)):
        figures.insert(0, (f"{main} per variant", fname))
    else:
        _remove_stale(workdir, fname)
    # Sweeps that evaluate data.test_lengths splits: each metric against the test length.
    train_length = _train_length(all_runs)
    for name, by_length in plots.length_metrics(sweep.metrics).items():
        fname = f"length_{_slug(name)}.png"
        path = os.path.join(workdir, fname)
        if plots.plot_length_curve(rows, name, by_length, path, train_length):
            figures.append((f"{name} against test length", fname))
        else:
            _remove_stale(workdir, fname)

    lines = _header(resolved, sweep, rows, git_commit())
    lines += ["", "## Results", "", tables.markdown_table(rows, sweep.metrics, digits, confidence)]
    lines += [
        f"Mean ± sample standard deviation (ddof=1) over the n finished seeds. Δ: mean difference "
        f"from the baseline `{sweep.baseline}` paired by seed over the n seeds finished in both, "
        f"with a {confidence:.0%} confidence interval from Student's t with n−1 degrees of "
        f"freedom; {tables.SIGNIFICANT} marks intervals that exclude 0. Diverged and failed runs "
        "are excluded from means and counted in their columns; Missing counts runs interrupted, "
        "still running or not started. Tokens/s and wall time: mean over finished runs.",
        "",
        f"Also: [`{RESULTS_CSV}`]({RESULTS_CSV}) (this table, full precision), "
        f"[`{RUNS_CSV}`]({RUNS_CSV}) (every run), [`{TABLE_TEX}`]({TABLE_TEX}) (LaTeX, booktabs).",
        "",
        "## Variants",
        "",
    ]
    for name, overrides in sweep.variants.items():
        flags = " ".join(f"`--config.{k}={format_override(v)}`" for k, v in overrides.items())
        base = " (baseline)" if name == sweep.baseline else ""
        lines.append(f"- `{name}`{base}: {flags or 'base config unchanged'}")
    if figures:
        lines += ["", "## Plots", ""]
        lines += [f"![{title}]({fname})\n" for title, fname in figures]
    bootstrap = bleu_bootstrap.sweep_section(runs, sweep.baseline)
    if bootstrap:
        lines += [""] + bootstrap
    found = summary.notes(sweep, rows)
    if found:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in found]
    lines += ["", "## Runs", "", tables.runs_markdown_table(all_runs, sweep.metrics, digits)]

    path = os.path.join(workdir, REPORT_FILE)
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path
