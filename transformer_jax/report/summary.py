"""Per-variant aggregation of a sweep's runs: the numbers behind every table and plot.

Means and standard deviations are over finished runs only; diverged, failed and missing runs are
counted, never silently dropped. Differences from the baseline are paired by seed (see stats.py).
"""

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence

from transformer_jax.report import stats
from transformer_jax.run_dir import LOG_FILE, SUMMARY_FILE
from transformer_jax.sweep import selection
from transformer_jax.sweep.spec import OverrideValue, Sweep
from transformer_jax.sweep_dir import RunRecord, read_runs_csv, run_dir


@dataclasses.dataclass(frozen=True)
class MetricSummary:
    """One final metric of one variant over its finished seeds.

    diff is None for the baseline row itself.
    """

    values: dict[int, float]  # seed -> value, finished runs that report the metric
    mean: float
    std: float  # sample std (ddof=1); NaN for n < 2
    diff: stats.PairedDifference | None
    # Holm-adjusted p-value of diff across the variants' differences from the baseline in this
    # metric (the family of one table column); NaN for the baseline and untested differences.
    p_holm: float = math.nan

    @property
    def n(self) -> int:
        return len(self.values)


@dataclasses.dataclass(frozen=True)
class VariantSummary:
    """One table row: a variant's metrics, cost and run outcomes."""

    name: str
    overrides: Mapping[str, OverrideValue]
    is_baseline: bool
    runs: tuple[RunRecord, ...]
    metrics: dict[str, MetricSummary]  # metric name ("split/metric") -> summary
    num_params: tuple[int, ...]  # distinct parameter counts seen (one unless the config varies)
    tokens_per_sec: float  # mean over finished runs; NaN if none
    wall_time_s: float  # mean over finished runs; NaN if none

    def count(self, *statuses: str) -> int:
        return sum(r.status in statuses for r in self.runs)

    @property
    def n_finished(self) -> int:
        return self.count("finished")

    @property
    def n_diverged(self) -> int:
        return self.count("diverged")

    @property
    def n_failed(self) -> int:
        return self.count("failed")

    @property
    def n_missing(self) -> int:
        """Runs not (yet) done: interrupted, running now, or never started."""
        return self.count("incomplete", "missing")


def _finite_mean(values: Sequence[float | None]) -> float:
    return stats.mean([float(v) for v in values if v is not None])


def read_runs(
    sweep: Sweep, workdir: str, runs_csv: str | Sequence[str] | None = None
) -> dict[str, tuple[RunRecord, ...]]:
    """Every (run variant, seed) of the sweep, in sweep order, read from its run directory, or
    from runs.csv files when given. Run variants are the variants, or with nuisance factors
    "<variant>/<setting>" (sweep.run_variants; report/tuning.py chooses among the settings),
    and with confirm_seeds "<variant>/confirm/<setting>" for every setting, a record per
    confirmation seed (sweep/selection.py read_runs).

    With several files (e.g. the committed results and a workdir that trained only new cells)
    a run one file lists as missing is taken from another; two files with a result for the same
    run are an error. Runs no file lists are missing; runs of variants or seeds that are not in
    the sweep are an error, so that a renamed variant is not silently dropped.
    """
    if runs_csv is None:
        return selection.read_runs(sweep, workdir)
    paths = [runs_csv] if isinstance(runs_csv, str) else list(runs_csv)
    records: dict[tuple[str, int], RunRecord] = {}
    for path in paths:
        for key, record in read_runs_csv(path, workdir).items():
            if key in records and "missing" not in (records[key].status, record.status):
                raise ValueError(
                    f"{key[0]}/seed_{key[1]} has a result in more than one of {', '.join(paths)}"
                )
            if key not in records or records[key].status == "missing":
                records[key] = record
    seeds_of = {name: sweep.seeds for name in sweep.run_variants}
    seeds_of |= {name: sweep.confirm_seeds for name in sweep.confirm_run_variants}
    unknown = sorted(f"{v}/seed_{s}" for v, s in records if s not in seeds_of.get(v, ()))
    if unknown:
        confirm = f"; confirmation seeds: {', '.join(map(str, sweep.confirm_seeds))}"
        raise ValueError(
            f"{', '.join(paths)} list runs that are not part of the sweep: {', '.join(unknown)}; "
            f"its variants: {', '.join(sweep.run_variants)}; seeds: "
            f"{', '.join(map(str, sweep.seeds))}" + (confirm if sweep.confirm_seeds else "")
        )
    return {
        name: tuple(
            records.get((name, seed))
            or RunRecord(name, seed, run_dir(workdir, name, seed), "missing")
            for seed in seeds
        )
        for name, seeds in seeds_of.items()
    }


def summarize(
    sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]], confidence: float = 0.95
) -> list[VariantSummary]:
    """One VariantSummary per variant, in the sweep's order."""

    def metric_values(records: Sequence[RunRecord], metric: str) -> dict[int, float]:
        values = {}
        for r in records:
            value = r.metric(metric) if r.status == "finished" else None
            if value is not None:
                values[r.seed] = value
        return values

    baseline_values = {m: metric_values(runs[sweep.baseline], m) for m in sweep.metrics}
    rows = []
    for name, overrides in sweep.variants.items():
        records = tuple(runs[name])
        finished = [r for r in records if r.status == "finished"]
        metrics = {}
        for m in sweep.metrics:
            values = metric_values(records, m)
            diff = (
                None
                if name == sweep.baseline
                else stats.paired_difference(values, baseline_values[m], confidence)
            )
            metrics[m] = MetricSummary(
                values=values,
                mean=stats.mean(list(values.values())),
                std=stats.sample_std(list(values.values())),
                diff=diff,
            )
        rows.append(
            VariantSummary(
                name=name,
                overrides=overrides,
                is_baseline=name == sweep.baseline,
                runs=records,
                metrics=metrics,
                num_params=tuple(
                    sorted({r.num_params for r in records if r.num_params is not None})
                ),
                tokens_per_sec=_finite_mean([r.tokens_per_sec for r in finished]),
                wall_time_s=_finite_mean([r.wall_time_s for r in finished]),
            )
        )
    for m in sweep.metrics:
        adjusted = stats.holm(
            [row.metrics[m].diff.p_value if row.metrics[m].diff else math.nan for row in rows]
        )
        for row, p in zip(rows, adjusted, strict=True):
            row.metrics[m] = dataclasses.replace(row.metrics[m], p_holm=p)
    return rows


def _logged_by_another_variant(
    metric: str, row: VariantSummary, rows: Sequence[VariantSummary]
) -> bool:
    return any(
        r.status == "finished" and r.metric(metric) is not None
        for other in rows
        if other is not row
        for r in other.runs
    )


def notes(sweep: Sweep, rows: Sequence[VariantSummary]) -> list[str]:
    """Warnings a reader of the table must see: failures, missing metrics, mixed code versions."""
    out = []
    for row in rows:
        if row.runs and all(r.status == "missing" for r in row.runs):
            seeds = ", ".join(str(r.seed) for r in row.runs)
            out.append(f"{row.name} has not been run (seeds {seeds})")
            continue
        for r in row.runs:
            where = f"{r.variant}/seed_{r.seed}"
            if r.status == "failed":
                failure = r.failure or {}
                tail = [line for line in failure.get("stderr_tail", "").splitlines() if line]
                last = tail[-1].strip() if tail else (r.error or "no error output")
                out.append(
                    f"{where} failed (return code {failure.get('returncode')}): {last}; "
                    f"see {os.path.join(r.path, LOG_FILE)}"
                )
            elif r.status == "diverged":
                out.append(
                    f"{where} diverged at step {r.step}: {r.error or 'non-finite loss'}; "
                    "excluded from means"
                )
            elif r.status == "incomplete":
                out.append(f"{where} is incomplete (interrupted or still running)")
            elif r.status == "missing":
                out.append(f"{where} has not been run")
        finished = [r for r in row.runs if r.status == "finished"]
        for m in sweep.metrics:
            lacking = [r for r in finished if r.metric(m) is None]
            if not lacking:
                continue
            if len(lacking) == len(finished) and _logged_by_another_variant(m, row, rows):
                # A metric of some variants only (ACT's ponder time, say): listing every metric
                # this variant does log would bury the notes that matter.
                out.append(f"{m} is not logged by {row.name} (other variants log it)")
                continue
            available = sorted(
                f"{split}/{key}" for split, ms in lacking[0].metrics.items() for key in ms
            )
            out.append(
                f"{m} is absent from {SUMMARY_FILE} of {len(lacking)} finished "
                f"run(s) of {row.name}; available: {', '.join(available) or 'none'}"
            )
    commits = sorted({v for row in rows for r in row.runs for v in r.code_versions})
    if len(commits) > 1:
        out.append(f"runs were trained from different git commits: {', '.join(commits)}")
    baseline = next(row for row in rows if row.is_baseline)
    if baseline.n_finished == 0:
        out.append(f"baseline {baseline.name} has no finished run: no differences can be computed")
    return out
