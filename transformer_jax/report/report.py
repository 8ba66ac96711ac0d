"""Writes a sweep's report (report.md, results.csv, runs.csv, table.tex, plots) from its workdir.

Everything is derived from WORKDIR/sweep.json and the run directories, so the report can be
regenerated at any time (`python -m transformer_jax.sweep --workdir=DIR --report_only`), also
while runs are still going, or from a runs.csv alone (`--runs_csv=PATH`), e.g. a committed
results/ folder. Flat sweeps get one table per metric against the baseline; factorial sweeps
(sweep/factors.py) one table of cells and one of effects per metric (report/factorial.py).
"""

import collections
import contextlib
import datetime
import os
import re
from collections.abc import Sequence
from typing import Any

from transformer_jax import environment, sweep_record
from transformer_jax.report import (
    bleu_bootstrap,
    equivalence,
    factorial,
    factorial_tables,
    forest,
    plots,
    sequential_section,
    summary,
    tables,
    tuning,
)
from transformer_jax.report.factorial_tables import EFFECTS_CSV
from transformer_jax.run_dir import git_commit, read_config, write_text
from transformer_jax.sweep import grid_edges
from transformer_jax.sweep import hparams as sweep_hparams
from transformer_jax.sweep.spec import Sweep, format_override, refused_overrides
from transformer_jax.sweep_dir import DONE_STATUSES, read_runs_csv, read_sweep_json

REPORT_FILE = "report.md"
RESULTS_CSV = "results.csv"
RUNS_CSV = "runs.csv"
TABLE_TEX = "table.tex"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _remove_stale(workdir: str, fname: str) -> None:
    """Deletes a figure an earlier report wrote that this one has no data for."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(workdir, fname))


def _code_versions(records) -> collections.Counter:
    """Code version (RunRecord.code_versions) -> the number of runs trained at it."""
    return collections.Counter(v for r in records for v in r.code_versions)


def code_warning(records) -> list[str]:
    """The lines that open report.md when its runs were not all trained at one clean commit:
    mixed versions, or uncommitted changes (a "+diff:" version, or a trainer's "-dirty")."""
    versions = _code_versions(records)
    dirty = sum(
        any("+diff:" in v or v.endswith("-dirty") for v in r.code_versions) for r in records
    )
    lines = []
    if len(versions) > 1:
        lines.append(
            f"> ⚠ **Mixed code**: the runs were trained at {len(versions)} code versions (listed "
            "below); a difference between variants may be one between versions."
        )
    if dirty:
        lines.append(
            f"> ⚠ **Uncommitted code**: {dirty} run(s) were trained from a tree with uncommitted "
            "changes (`+diff:` gives the sha256 of the changes, `-dirty` an unrecorded one)."
        )
    unchecked = sum(any("+files:" in v for v in r.code_versions) for r in records)
    if unchecked:
        lines.append(
            f"> ⚠ **Unchecked code**: {unchecked} run(s) were trained where git could not check "
            "the tree (no git, or launched outside the checkout); `+files:` gives the sha256 of "
            "the code's files instead."
        )
    return [*lines, ""] if lines else []


def refused_warning(resolved: dict[str, Any], sweep: Sweep, records) -> list[str]:
    """The line that opens report.md when the current base config refuses some of the sweep's
    overrides (fields renamed or removed since its runs trained, spec.refused_overrides): the
    Variants give them as they ran, at the commits named here."""
    config_spec = resolved.get("config_spec", sweep.config_spec)
    refused = refused_overrides(sweep, config_spec, resolved.get("cwd"))
    if not refused:
        return []
    # Here, not at the top: the model config imports the layers (JAX, flax).
    from transformer_jax.config.model import nested_key

    keys = ", ".join(
        f"`{key}`" + (f" (now `{nested_key(key)}`)" if nested_key(key) else "") for key in refused
    )
    versions = _code_versions(records)
    commits = sorted({m[0][:8] for v in versions if (m := re.match(r"[0-9a-f]{7,40}", v))})
    at = f", at {', '.join(f'`{c}`' for c in commits)}" if commits else ""
    return [
        f"> ⚠ **Overrides since renamed or removed**: `{config_spec}` as of this report's commit "
        f"refuses {keys}; the Variants below give the overrides as the runs trained with "
        f"them{at}.",
        "",
    ]


def _header(
    resolved: dict[str, Any], sweep: Sweep, all_runs, report_commit: str, workdir: str
) -> list[str]:
    # Commands as placeholders: launches recorded before the runner wrote them so name paths.
    known = sweep_record.places(workdir)
    invocations = [
        {**i, "command": sweep_record.scrub(i.get("command", "unknown"), known)}
        for i in resolved.get("invocations") or [{}]
    ]
    last = invocations[-1]
    versions = _code_versions(all_runs)
    name = os.path.splitext(os.path.basename(resolved.get("file", "sweep")))[0]
    lines = [
        f"# Sweep `{name}`",
        "",
        *code_warning(all_runs),
        *refused_warning(resolved, sweep, all_runs),
        "> " + sweep.description.strip().replace("\n", "\n> "),
        "",
        f"- Sweep file: `{resolved.get('file', 'unknown')}`",
        f"- Base config: `{resolved.get('config_spec', sweep.config_spec)}`"
        + (" (quick: every run shrunk)" if resolved.get("quick") else ""),
        f"- Seeds: {', '.join(map(str, sweep.seeds))}"
        + (
            " choose the settings; confirmation seeds "
            f"{', '.join(map(str, sweep.confirm_seeds))} give every test figure"
            if sweep.confirm_seeds
            else ""
        )
        + f"; baseline: `{sweep.baseline}`",
        f"- Git commit (report): `{report_commit}`; runs trained at: "
        + (", ".join(f"`{c}` ({n} runs)" for c, n in sorted(versions.items())) or "unknown"),
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


def _isolation_plots(workdir: str, sweep: Sweep, runs) -> list[tuple[str, str]]:
    """One isolation plot per scientific factor (a flat sweep's variants are one factor):
    select_on against the learning rate, one line per variant, coloured by the factor's level;
    returns (title, file name) of those written."""
    key, curves = tuning.isolation_curves(sweep, runs)
    factors = {
        f.name: {v: sweep.cell_of(v)[i] if sweep.cell_of(v) is not None else v for v in curves}
        for i, f in enumerate(sweep.trained_factors)
    } or {"variant": {v: v for v in curves}}
    out = []
    for name, groups in factors.items():
        fname = f"isolation_{_slug(name)}.png"
        title = (
            f"{sweep.select_on} vs {key}, one line per variant (colour: {name})\n"
            "mean over seeds, at each value the best over the other nuisance values"
        )
        path = os.path.join(workdir, fname)
        if plots.plot_isolation(curves, groups, key, sweep.select_on, title, path):
            out.append((f"Isolation plot of {name}: {sweep.select_on} against {key}", fname))
        else:
            _remove_stale(workdir, fname)
    return out


def _curve_metrics(sweep: Sweep) -> list[tuple[str, str]]:
    """(split, metric) of every learning curve the report draws: the training loss, the
    selection metric (the validation curve a tuned setting was chosen on) and each reported
    metric, but those of data.test_lengths splits (their figure is against the length)."""
    lengths = {
        m for by_length in plots.length_metrics(sweep.metrics).values() for m in by_length.values()
    }
    names = ["train/loss", *([sweep.select_on] if sweep.select_on else []), *sweep.metrics]
    return [tuple(m.partition("/")[::2]) for m in dict.fromkeys(names) if m not in lengths]


def _forest_link(figures: dict[str, str], title: str, confidence: float) -> list[str]:
    if title not in figures:
        return []
    return [f"![{title}: each Δ with its {confidence:.0%} CI]({figures[title]})", ""]


def _finished(records) -> int:
    return sum(r.status in DONE_STATUSES for r in records)


def check_not_fewer(workdir: str, records, force: bool) -> None:
    """Refuses (ValueError, before anything is written) a report listing fewer finished or
    diverged runs than the WORKDIR/runs.csv it would replace, unless `force`."""
    path = os.path.join(workdir, RUNS_CSV)
    try:
        before = _finished(read_runs_csv(path, workdir).values()) if os.path.isfile(path) else 0
    except ValueError:
        before = 0  # not a runs.csv this reads: nothing it could keep
    if not force and _finished(records) < before:
        raise ValueError(
            f"the report would list {_finished(records)} finished runs where {path} lists "
            f"{before}: their run directories are missing and {sweep_record.RECORD_FILE} does "
            "not record them; nothing was written (--force writes it anyway)"
        )


def write_report(
    workdir: str,
    digits: int = 3,
    confidence: float = 0.95,
    runs_csv: str | Sequence[str] | None = None,
    force: bool = False,
) -> str:
    """Writes all report files into workdir and returns the path of report.md.

    The runs are read from their run directories, and those WORKDIR/runs.jsonl records but
    whose directories are gone (a committed results/ folder) from the record
    (transformer_jax/sweep_record.py), which is then rewritten with every ended run. Without
    run directories and a record, from WORKDIR/runs.csv (a folder committed before records).

    runs_csv: read the runs from this runs.csv (or these, see summary.read_runs) instead of the
    run directories; learning curves cannot be redrawn then, so the figures an earlier report
    drew are kept.
    force: write even a report with fewer finished runs than the runs.csv it replaces.
    """
    if isinstance(runs_csv, str):
        runs_csv = [runs_csv]
    resolved = read_sweep_json(workdir)
    # With grid_extension, the settings its record (grid_extensions.json) added.
    sweep = grid_edges.applied(Sweep.from_dict(resolved), workdir)
    with sweep_record.unpacked(workdir) as record:
        return _write_report(workdir, resolved, sweep, record, digits, confidence, runs_csv, force)


def _write_report(workdir, resolved, sweep, record, digits, confidence, runs_csv, force) -> str:
    runs = summary.read_runs(sweep, workdir, runs_csv)
    committed = os.path.join(workdir, RUNS_CSV)
    # No run trained here: no run directory, or only those an earlier report created to hold
    # the HParams sessions of the runs its runs.csv lists (sweep/hparams.py write_sessions).
    never_run = all(
        r.status == "missing"
        or (r.status == "incomplete" and sweep_hparams.holds_only_sessions(r.path))
        for records in runs.values()
        for r in records
    )
    if runs_csv is None and never_run and os.path.isfile(committed):
        runs_csv = [committed]  # a folder committed before records: its runs.csv is all it has
        runs = summary.read_runs(sweep, workdir, runs_csv)
    all_runs = tuning.recorded_runs(sweep, runs)
    check_not_fewer(workdir, all_runs, force)
    # Each ended run's TensorBoard HParams session, also for runs that predate them.
    sweep_hparams.write_sessions(
        workdir, sweep, resolved["config_spec"], all_runs, resolved.get("cwd")
    )
    tuned = None
    if sweep.nuisance:
        # Every variant at the setting chosen on validation (report/tuning.py); the tables,
        # plots and CSVs below are of these, the Tuning section compares with the default.
        by_run_variant, tuned = runs, tuning.select(sweep, runs)
        runs = tuned.tuned
    rows = summary.summarize(sweep, runs, confidence)
    metric_tables = factorial.metric_tables(sweep, rows, confidence)

    if runs_csv is None:
        # Every ended run, and those recorded before whose variant or seed the sweep has since
        # dropped (a record loses nothing by a narrower report).
        ended = [r for r in all_runs if r.status in sweep_record.RECORDED_STATUSES]
        keys = {(r.variant, r.seed) for r in ended}
        sweep_record.write_record(
            workdir,
            [sweep_record.entry(r.path, r.variant, r.seed, r.status, workdir) for r in ended]
            + [item for key, item in record.items() if key not in keys],
        )
    write_text(
        os.path.join(workdir, RESULTS_CSV), tables.results_csv(rows, sweep.metrics, confidence)
    )
    write_text(os.path.join(workdir, RUNS_CSV), tables.runs_csv(all_runs, sweep.recorded_metrics))
    write_text(
        os.path.join(workdir, TABLE_TEX),
        # A factorial sweep's paper table is its effects, each against its own reference.
        factorial_tables.latex_effects_table(metric_tables, digits, confidence)
        if metric_tables
        else tables.latex_table(rows, sweep.metrics, digits, confidence),
    )
    if metric_tables:
        write_text(
            os.path.join(workdir, EFFECTS_CSV),
            factorial_tables.effects_csv(metric_tables, confidence),
        )
    else:
        _remove_stale(workdir, EFFECTS_CSV)

    equivalent_lines = []
    if sweep.equivalence_margins:
        verdicts = equivalence.rows_of(sweep, rows, confidence)
        write_text(os.path.join(workdir, equivalence.EQUIVALENCE_CSV), equivalence.to_csv(verdicts))
        equivalent_lines = ["", "### Equivalence", ""]
        equivalent_lines += equivalence.section(verdicts, digits, confidence)
        equivalent_lines += [
            "",
            f"Also: [`{equivalence.EQUIVALENCE_CSV}`]"
            f"({equivalence.EQUIVALENCE_CSV}) (full precision).",
        ]
    else:
        _remove_stale(workdir, equivalence.EQUIVALENCE_CSV)

    # A forest plot under each table of the Results: its Δs, CIs and Holm marks.
    forest_figures = {}
    for found in forest.forests(sweep, rows, metric_tables, confidence):
        fname = f"forest_{_slug(found.title)}.png"
        path = os.path.join(workdir, fname)
        if plots.plot_forest(
            found.intervals, found.title, found.against, path, confidence, found.margin
        ):
            forest_figures[found.title] = fname
        else:
            _remove_stale(workdir, fname)

    main = sweep.metrics[0]
    figures, kept = [], []
    for split, metric in _curve_metrics(sweep):
        fname = f"curves_{_slug(split)}_{_slug(metric)}.png"
        title = f"{split}/{metric} vs step"
        if runs_csv is not None:
            # No metrics.jsonl to draw from: keep the figure drawn from the run directories.
            if os.path.isfile(os.path.join(workdir, fname)):
                figures.append((title, fname))
                kept.append(fname)
        elif plots.plot_curves(runs, split, metric, os.path.join(workdir, fname), sweep.baseline):
            figures.append((title, fname))
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

    sequential_lines = []
    if sweep.confirm_rounds and tuned is not None:
        found = sequential_section.decisions(sweep, by_run_variant, tuned.chosen, workdir)
        write_text(
            os.path.join(workdir, sequential_section.SEQUENTIAL_CSV),
            sequential_section.to_csv(found),
        )
        sequential_lines = ["", "### Seeds until decided", ""]
        sequential_lines += sequential_section.section(sweep, found, digits)
    tuning_lines = []
    if tuned is not None:
        write_text(
            os.path.join(workdir, tuning.SELECTION_CSV),
            tuning.selection_csv(sweep, tuned, by_run_variant),
        )
        untuned_rows = summary.summarize(sweep, tuned.untuned, confidence)
        tuning_lines = ["", "## Tuning", ""]
        tuning_lines += tuning.section(sweep, tuned, rows, untuned_rows, digits, confidence)
        tuning_lines += tuning.best_at_each_value_lines(sweep, by_run_variant, digits)
        if sweep.grid_extension is not None:
            tuning_lines += sequential_section.extension_lines(sweep, workdir, by_run_variant)
        figures += _isolation_plots(workdir, sweep, by_run_variant)

    lines = _header(resolved, sweep, all_runs, git_commit(), workdir)
    lines += ["", "## Results", ""]
    if metric_tables:
        lines += [
            f"Per metric: every cell's mean ± sample std (ddof=1) over its n finished seeds, then "
            "each factor's effect measured against that factor's reference level with the other "
            f"factors held fixed (the reference cell is `{sweep.baseline}`).",
            "",
        ]
        for table in metric_tables:
            title = (
                f"`{table.title}`"
                if list(table.columns) == [""]
                else f"`{table.title}` by {sweep.split_factor.name}"
            )
            lines += [f"### {title}", ""]
            lines += [factorial_tables.cells_table(sweep, rows, table, digits)]
            lines += [factorial_tables.effects_table(table, digits, confidence)]
            lines += _forest_link(forest_figures, table.title, confidence)
    else:
        for metric in sweep.metrics:
            lines += [f"### `{metric}`", "", tables.metric_table(rows, metric, digits, confidence)]
            lines += _forest_link(forest_figures, metric, confidence)
    lines += ["### Cost and outcomes", "", tables.cost_table(rows)]
    lines += [
        f"Mean ± sample standard deviation (ddof=1) over the n finished seeds. Δ: mean "
        f"difference paired by seed over the n seeds finished in both, with a {confidence:.0%} "
        "confidence interval from Student's t with n−1 degrees of freedom; "
        f"`{tables.SIGNIFICANT}` marks intervals that exclude 0, {tables.HOLM} differences that "
        "survive Holm's correction across their table. Diverged and failed runs are excluded "
        "from means and counted in their columns; Missing counts runs interrupted, still "
        "running or not started. Tokens/s and wall time: mean over finished runs.",
        "",
        f"Also: [`{RESULTS_CSV}`]({RESULTS_CSV}) (every metric of every variant and its "
        "difference from the baseline, full precision), "
        + (
            f"[`{EFFECTS_CSV}`]({EFFECTS_CSV}) (every comparison above, full precision), "
            if metric_tables
            else ""
        )
        + f"[`{RUNS_CSV}`]({RUNS_CSV}) (every run), [`{TABLE_TEX}`]({TABLE_TEX}) (LaTeX, "
        + ("booktabs, the effects)." if metric_tables else "booktabs)."),
    ]
    lines += sequential_lines
    lines += equivalent_lines
    lines += tuning_lines
    if sweep.factors:
        lines += ["", "## Factors", ""] + factorial_tables.factors_section(sweep)
    lines += ["", "## Variants", ""]
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
    found = summary.notes(sweep, rows) + (list(tuned.notes) if tuned is not None else [])
    if runs_csv is not None:
        found.insert(
            0,
            f"rebuilt from {', '.join(f'`{os.path.relpath(p, workdir)}`' for p in runs_csv)} "
            "without the run directories"
            + (
                f"; the learning curves ({', '.join(kept)}) are those drawn from the run "
                "directories by an earlier report"
                if kept
                else "; no learning curves (they need the run directories)"
            ),
        )
    untrained = [row.name for row in rows if all(r.status == "missing" for r in row.runs)]
    if untrained:
        found.append(
            f"to train only the variants never run: `python -m transformer_jax.sweep "
            f"--sweep={resolved.get('file', 'SWEEP_FILE')} --workdir=DIR "
            f"--variants={','.join(untrained)}`, then rebuild this report with `--report_only "
            f"--runs_csv={RUNS_CSV},DIR/{RUNS_CSV}` (or from the run directories)"
        )
    if found:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in found]
    lines += ["", "## Runs", ""]
    lines += [tables.runs_markdown_table(all_runs, sweep.recorded_metrics, digits)]

    path = os.path.join(workdir, REPORT_FILE)
    write_text(path, "\n".join(lines))
    return path
