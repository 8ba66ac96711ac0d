"""The rows of the report's forest plots: every comparison its tables print, with the same Δ,
confidence interval and Holm verdict (nothing is computed again here).

A flat sweep has one plot per reported metric, each variant against the baseline (the rows of
report/summary.py); a factorial sweep one per effects table (report/factorial.py), each
comparison against its own reference. A metric with an equivalence margin
(`Sweep.equivalence_margins`) gets the band ±margin shaded.
"""

import dataclasses
from collections.abc import Sequence

from transformer_jax.report.factorial import MetricTable
from transformer_jax.report.plots import Interval
from transformer_jax.report.summary import VariantSummary
from transformer_jax.report.tables import survives_holm
from transformer_jax.sweep.spec import Sweep


@dataclasses.dataclass(frozen=True)
class Forest:
    """One forest plot: `title` names its table (the metric, or a factorial table's title),
    `against` what each Δ is measured from, `margin` the equivalence margin or None."""

    title: str
    against: str
    intervals: tuple[Interval, ...]
    margin: float | None


def forests(
    sweep: Sweep,
    rows: Sequence[VariantSummary],
    metric_tables: Sequence[MetricTable],
    confidence: float = 0.95,
) -> list[Forest]:
    """One Forest per table of the report's Results, in its order."""
    margins = sweep.equivalence_margins
    if metric_tables:
        out = []
        for table in metric_tables:
            # A table across the split factor holds one metric per split: one margin if they
            # share it, else none (the equivalence section gives each its own).
            found = {margins.get(metric) for metric in table.columns.values()}
            margin = found.pop() if len(found) == 1 else None
            intervals = tuple(
                Interval(
                    c.label + (f" [{c.held_fixed}]" if c.held_fixed else ""),
                    c.diff,
                    survives_holm(c.p_holm, confidence),
                )
                for c in table.comparisons
            )
            out.append(Forest(table.title, "each factor's reference level", intervals, margin))
        return out
    out = []
    for metric in sweep.metrics:
        intervals = tuple(
            Interval(
                row.name,
                row.metrics[metric].diff,
                survives_holm(row.metrics[metric].p_holm, confidence),
            )
            for row in rows
            if row.metrics[metric].diff is not None
        )
        out.append(Forest(metric, sweep.baseline, intervals, margins.get(metric)))
    return out
