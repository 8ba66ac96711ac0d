"""Equivalence verdicts: "different", "equivalent" or "inconclusive" instead of "matches".

A difference whose confidence interval contains 0 is not evidence that two variants are alike:
with 3 seeds the interval is wide. A sweep declares, per metric, the margin within which a
difference does not matter (`Sweep.equivalence_margins`, e.g. {"test/loss": 0.02}); each
comparison of the report (a flat sweep's variant - baseline, a factorial sweep's effects) then
gets one verdict, from the paired per-seed differences (report/stats.py):

- different: the two-sided 95% interval of Δ excludes 0 (the `*` of the tables);
- equivalent: otherwise, when the 90% interval lies inside (-margin, +margin): two one-sided
  t-tests (TOST, Schuirmann 1987), each at 5%, reject Δ <= -margin and Δ >= +margin;
- inconclusive: neither.

Saturation: a metric with a bound (the best value it can take) cannot tell variants apart when
both sides already sit at it. The bound is known from the metric's name: a name ending in
"accuracy" is bounded by 1.0, one ending in "loss" by 0.0 (mean_loss too); other metrics have
none. A comparison is flagged "cannot discriminate here" when the mean of every cell in it lies
within the margin of the bound: "equivalent" there means both are at the ceiling, not that the
variants are alike.
"""

import csv
import dataclasses
import io
import math
from collections.abc import Mapping, Sequence

from transformer_jax.report import factorial, stats
from transformer_jax.report.tables import format_paired, survives_holm

DIFFERENT, EQUIVALENT, INCONCLUSIVE = "different", "equivalent", "inconclusive"
SATURATED = "cannot discriminate here"
EQUIVALENCE_CSV = "equivalence.csv"


def bound(metric: str) -> float | None:
    """The best value `metric` ("split/name") can take: 1.0 for accuracies, 0.0 for losses, by
    the name's suffix; None when the name says neither."""
    name = metric.rpartition("/")[2]
    if name.endswith("accuracy"):
        return 1.0
    if name.endswith("loss"):
        return 0.0
    return None


def saturated(metric: str, means: Sequence[float], margin: float) -> bool:
    """True when every mean lies within `margin` of the metric's bound (see `bound`)."""
    at = bound(metric)
    finite = [m for m in means if not math.isnan(m)]
    if at is None or not finite or len(finite) < len(means):
        return False
    return all(abs(m - at) <= margin for m in finite)


def equivalence_interval(
    diff: stats.PairedDifference, confidence: float = 0.95
) -> tuple[float, float]:
    """The interval of the two one-sided tests at level (1 - confidence) each: mean +- t_{conf,
    n-1} * se (the 90% interval for confidence 0.95), se recovered from diff's two-sided
    `confidence` interval. NaNs for fewer than two seeds."""
    if diff.n < 2 or math.isnan(diff.low):
        return math.nan, math.nan
    df = diff.n - 1
    se = (diff.high - diff.low) / 2.0 / stats.t_quantile(0.5 + confidence / 2.0, df)
    half = stats.t_quantile(confidence, df) * se
    return diff.mean - half, diff.mean + half


def verdict(diff: stats.PairedDifference, margin: float, confidence: float = 0.95) -> str:
    """DIFFERENT, EQUIVALENT or INCONCLUSIVE (see the module docstring); "" below two seeds."""
    low, high = equivalence_interval(diff, confidence)
    if math.isnan(low):
        return ""
    if diff.excludes_zero:
        return DIFFERENT
    if -margin < low and high < margin:
        return EQUIVALENT
    return INCONCLUSIVE


@dataclasses.dataclass(frozen=True)
class Row:
    """One comparison's equivalence: the table it belongs to, its metric and margin, the cell
    means it compares, its 90% interval, verdict and saturation flag."""

    title: str
    metric: str
    comparison: factorial.Comparison
    margin: float
    means: tuple[float, ...]
    low: float
    high: float
    verdict: str
    saturated: bool


def _flat_metric(columns: Mapping[str, str], held_fixed: str) -> str:
    """The metric of a variant outside a factorial grid: its table's column, chosen by the
    split factor's level in held_fixed ("split=test_long") when the table spans splits."""
    if "" in columns:
        return columns[""]
    return columns[held_fixed.rpartition("=")[2]]


def _comparisons(sweep, rows, confidence: float):
    """(title, comparison, term name -> (metric, seed -> value)) of every comparison the
    report's tables make (Holm-adjusted per table as there)."""
    by_name = {row.name: row for row in rows}
    tables = factorial.metric_tables(sweep, rows, confidence)
    if not tables:
        for metric in sweep.metrics:
            values = {row.name: dict(row.metrics[metric].values) for row in rows}
            family = factorial.flat_comparisons(values, sweep.baseline, confidence)
            terms = {name: (metric, v) for name, v in values.items()}
            yield from ((metric, c, terms) for c in factorial.with_holm(family))
        return
    for table in tables:
        grouped = list(table.columns) != [""]
        terms = {
            table.design.name(cell): (table.columns[cell[-1] if grouped else ""], values)
            for cell, values in table.design.values.items()
        }
        for c in table.comparisons:
            if c.kind != factorial.FLAT:
                yield table.title, c, terms
                continue
            metric = _flat_metric(table.columns, c.held_fixed)
            flat = {n: (metric, dict(by_name[n].metrics[metric].values)) for _, n in c.terms}
            yield table.title, c, flat


def rows_of(sweep, rows, confidence: float = 0.95) -> list[Row]:
    """An equivalence Row for every comparison of the report whose metric has a margin; the
    metric of a comparison is that of its first term (a table across the split factor holds
    one metric per split)."""
    margins = sweep.equivalence_margins
    out = []
    for title, c, terms in _comparisons(sweep, rows, confidence):
        metric = terms[c.terms[0][1]][0]
        if metric not in margins or c.diff.n == 0:
            continue
        margin = margins[metric]
        means = tuple(stats.mean(list(terms[name][1].values())) for _, name in c.terms)
        low, high = equivalence_interval(c.diff, confidence)
        flag = saturated(metric, means, margin)
        out.append(
            Row(
                title,
                metric,
                c,
                margin,
                means,
                low,
                high,
                verdict(c.diff, margin, confidence),
                flag,
            )
        )
    return out


def _num(x: float, digits: int) -> str:
    return "–" if math.isnan(x) else f"{x:+.{digits}f}"


def section(rows: Sequence[Row], digits: int = 3, confidence: float = 0.95) -> list[str]:
    """The report's "Equivalence" section (Markdown lines)."""
    tost = 2.0 * confidence - 1.0
    lines = [
        f"Each comparison with a declared margin: *{DIFFERENT}* when the {confidence:.0%} interval "
        f"of Δ excludes 0; else *{EQUIVALENT}* when the {tost:.0%} interval lies inside ±margin "
        f"(two one-sided t-tests at {1 - confidence:.0%}); else *{INCONCLUSIVE}*. Saturated: "
        "every cell's mean lies within the margin of the metric's bound (1 for accuracies, 0 "
        f"for losses): {SATURATED}.",
        "",
    ]
    header = ["Metric", "Comparison", "Held fixed", "Δ", f"{tost:.0%} interval", "Margin"]
    header += ["Verdict", "Saturated"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        c = r.comparison
        cells = [
            f"`{r.metric}`",
            c.label,
            c.held_fixed or "–",
            format_paired(c.diff, digits, survives_holm(c.p_holm, confidence)),
            f"[{_num(r.low, digits)}, {_num(r.high, digits)}]",
            f"±{r.margin:g}",
            f"**{r.verdict}**" if r.verdict else "–",
            SATURATED if r.saturated else "",
        ]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return lines


def to_csv(rows: Sequence[Row]) -> str:
    """equivalence.csv: one line per Row, full precision; empty cells for undefined values."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["table", "metric", "comparison", "held_fixed", "diff", "ci_low", "ci_high", "n"]
        + ["tost_low", "tost_high", "margin", "verdict", "saturated", "means"]
    )
    for r in rows:
        d = r.comparison.diff
        writer.writerow(
            [r.title, r.metric, r.comparison.label, r.comparison.held_fixed]
            + [_full(d.mean), _full(d.low), _full(d.high), d.n, _full(r.low), _full(r.high)]
            + [repr(r.margin), r.verdict, r.saturated, " ".join(_full(m) for m in r.means)]
        )
    return out.getvalue()


def _full(x: float) -> str:
    return "" if math.isnan(x) else repr(float(x))
