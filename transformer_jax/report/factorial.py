"""The comparisons of a sweep report: every difference against its own baseline, Holm-adjusted.

A flat sweep compares each variant with the baseline. A factorial sweep (sweep/factors.py)
compares cells that differ in one factor only:

- simple effect: moving one factor from its reference level to another level with every other
  factor held fixed, paired by seed between the two cells (dk64_none - dk64_sqrt_dk, not
  dk64_none - sqrt_dk);
- interaction of two factors (when the four cells of a 2x2 sub-design exist): the difference of
  the simple effects of one factor at the two levels of the other, paired by seed, i.e. per seed
  (y_ab - y_a0b) - (y_ab0 - y_a0b0), with its t interval;
- marginal effect (only in a balanced design, the full grid): the simple effect averaged over
  the levels of the other factors, per seed, then its t interval.

Intervals and p-values are those of report/stats.py (Student's t over the per-seed contrasts).
Every table is one family: Holm's step-down correction runs over its comparisons that have a
p-value (two or more paired seeds), so a difference marked as surviving it is unlikely to be one
of the k chance findings that k unadjusted intervals would give.
"""

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence

from transformer_jax.report import stats
from transformer_jax.report.summary import VariantSummary
from transformer_jax.sweep.spec import Sweep

Cell = tuple[str, ...]
SIMPLE, INTERACTION, MARGINAL, FLAT = "simple", "interaction", "marginal", "flat"


@dataclasses.dataclass(frozen=True)
class DesignFactor:
    name: str
    levels: tuple[str, ...]
    reference: str


@dataclasses.dataclass(frozen=True)
class Design:
    """The cells of a factorial design and, per cell, seed -> value of one metric.

    values holds every cell of the design (an empty dict when the cell has no finished run),
    in the sweep's cell order; names, where given, what a cell is called in tables (its
    variant, with the split level), else its levels joined by "/".
    """

    factors: tuple[DesignFactor, ...]
    values: Mapping[Cell, Mapping[int, float]]
    names: Mapping[Cell, str] = dataclasses.field(default_factory=dict)

    def name(self, cell: Cell) -> str:
        return self.names.get(cell) or "/".join(cell)

    @property
    def balanced(self) -> bool:
        """True when the design is the full grid of its factors."""
        grid = set(itertools.product(*(f.levels for f in self.factors)))
        return set(self.values) == grid


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One row of an effects table.

    kind: SIMPLE, INTERACTION, MARGINAL or FLAT (a variant outside the grid - baseline).
    factors: the factor(s) it is about; effect: what is compared, e.g. "none − sqrt_dk";
    held_fixed: the levels of the other factors ("" when there are none).
    terms: (coefficient, cell or variant name) of the contrast.
    """

    kind: str
    factors: tuple[str, ...]
    effect: str
    held_fixed: str
    terms: tuple[tuple[float, str], ...]
    diff: stats.PairedDifference
    p_holm: float = math.nan

    def survives_holm(self, alpha: float) -> bool:
        return not math.isnan(self.p_holm) and self.p_holm <= alpha

    @property
    def label(self) -> str:
        if self.kind == FLAT:
            return self.effect
        return f"{' × '.join(self.factors)}: {self.effect}"


def _held(factors: Sequence[DesignFactor], cell: Cell, skip: Sequence[int]) -> str:
    return ", ".join(f"{f.name}={cell[j]}" for j, f in enumerate(factors) if j not in skip)


def _with(cell: Cell, i: int, level: str) -> Cell:
    return cell[:i] + (level,) + cell[i + 1 :]


def simple_effects(design: Design, confidence: float = 0.95) -> list[Comparison]:
    """Each factor from its reference to each other level, at every setting of the other
    factors where both cells exist; factor, then level, then cell order."""
    out = []
    for i, f in enumerate(design.factors):
        for level in f.levels:
            if level == f.reference:
                continue
            for base in design.values:
                target = _with(base, i, level)
                if base[i] != f.reference or target not in design.values:
                    continue
                terms = ((1.0, target), (-1.0, base))
                out.append(
                    Comparison(
                        SIMPLE,
                        (f.name,),
                        f"{level} − {f.reference}",
                        _held(design.factors, base, (i,)),
                        tuple((c, design.name(cell)) for c, cell in terms),
                        stats.paired_contrast(
                            [(c, design.values[cell]) for c, cell in terms], confidence
                        ),
                    )
                )
    return out


def interactions(design: Design, confidence: float = 0.95) -> list[Comparison]:
    """For every pair of factors (A, B) in factor order, non-reference levels a, b and setting
    of the others where the four cells exist: (effect of b at A=a) - (effect of b at A=reference),
    paired by seed; the same number as (effect of a at B=b) - (effect of a at B=reference)."""
    out = []
    factors = design.factors
    for i, j in itertools.combinations(range(len(factors)), 2):
        fa, fb = factors[i], factors[j]
        for a in fa.levels:
            for b in fb.levels:
                if a == fa.reference or b == fb.reference:
                    continue
                for c00 in design.values:
                    if c00[i] != fa.reference or c00[j] != fb.reference:
                        continue
                    c10, c01 = _with(c00, i, a), _with(c00, j, b)
                    c11 = _with(c10, j, b)
                    if not all(c in design.values for c in (c10, c01, c11)):
                        continue
                    terms = ((1.0, c11), (-1.0, c01), (-1.0, c10), (1.0, c00))
                    out.append(
                        Comparison(
                            INTERACTION,
                            (fa.name, fb.name),
                            f"({b} − {fb.reference}) at {fa.name}={a} minus at "
                            f"{fa.name}={fa.reference}",
                            _held(factors, c00, (i, j)),
                            tuple((c, design.name(cell)) for c, cell in terms),
                            stats.paired_contrast(
                                [(c, design.values[cell]) for c, cell in terms], confidence
                            ),
                        )
                    )
    return out


def marginal_effects(design: Design, confidence: float = 0.95) -> list[Comparison]:
    """Each factor's effect averaged (per seed) over all settings of the other factors; only
    for a balanced design with two or more factors (otherwise the average would weigh the other
    factors' levels by which cells happen to exist, or equal the simple effect)."""
    if len(design.factors) < 2 or not design.balanced:
        return []
    out = []
    for i, f in enumerate(design.factors):
        contexts = [c for c in design.values if c[i] == f.reference]
        weight = 1.0 / len(contexts)
        others = [g.name for j, g in enumerate(design.factors) if j != i]
        for level in f.levels:
            if level == f.reference:
                continue
            terms = []
            for base in contexts:
                terms += [(weight, _with(base, i, level)), (-weight, base)]
            out.append(
                Comparison(
                    MARGINAL,
                    (f.name,),
                    f"{level} − {f.reference}",
                    f"averaged over {', '.join(others)}",
                    tuple((c, design.name(cell)) for c, cell in terms),
                    stats.paired_contrast(
                        [(c, design.values[cell]) for c, cell in terms], confidence
                    ),
                )
            )
    return out


def flat_comparisons(
    values: Mapping[str, Mapping[int, float]],
    baseline: str,
    confidence: float = 0.95,
    held_fixed: str = "",
) -> list[Comparison]:
    """Each variant of values (variant -> seed -> value) minus the baseline, paired by seed."""
    return [
        Comparison(
            FLAT,
            (),
            f"{name} − {baseline}",
            held_fixed,
            ((1.0, name), (-1.0, baseline)),
            stats.paired_difference(v, values[baseline], confidence),
        )
        for name, v in values.items()
        if name != baseline
    ]


def with_holm(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """The comparisons with p_holm set: Holm's correction over those with a p-value."""
    adjusted = stats.holm([c.diff.p_value for c in comparisons])
    return [dataclasses.replace(c, p_holm=p) for c, p in zip(comparisons, adjusted, strict=True)]


def analyze(design: Design, confidence: float = 0.95) -> list[Comparison]:
    """Simple effects, interactions and (balanced designs) marginal effects, without Holm."""
    return (
        simple_effects(design, confidence)
        + interactions(design, confidence)
        + marginal_effects(design, confidence)
    )


@dataclasses.dataclass(frozen=True)
class MetricTable:
    """One reported metric of a factorial sweep: what its tables show.

    title: the metric ("test/seq_accuracy") or, across the split factor, its key
    ("seq_accuracy"); columns: split factor level -> "split/metric", or {"": metric} without
    the split factor; design: the factorial design; comparisons: the family, Holm-adjusted.
    """

    title: str
    columns: Mapping[str, str]
    design: Design
    comparisons: tuple[Comparison, ...]


def metric_tables(
    sweep: Sweep, rows: Sequence[VariantSummary], confidence: float = 0.95
) -> list[MetricTable]:
    """One MetricTable per reported metric of a factorial sweep, in the sweep's metric order;
    metrics listed for every split of the split factor give one table across it (at the first
    one's place). Empty for a flat sweep (its rows carry the comparisons with the baseline)."""
    if not sweep.is_factorial:
        return []
    grouped = sweep.split_metrics()
    in_group = {m: key for key, by_level in grouped.items() for m in by_level.values()}
    split = sweep.split_factor
    tables, done = [], set()
    for metric in sweep.metrics:
        key = in_group.get(metric)
        if key in done:
            continue
        columns = dict(grouped[key]) if key is not None else {"": metric}
        factors = [
            DesignFactor(f.name, tuple(f.levels), f.reference) for f in sweep.trained_factors
        ]
        if key is not None:
            done.add(key)
            factors.append(DesignFactor(split.name, tuple(split.levels), split.reference))
        values: dict[Cell, dict[int, float]] = {}
        names: dict[Cell, str] = {}
        extras = [row.name for row in rows if sweep.cell_of(row.name) is None]
        for row in rows:
            cell = sweep.cell_of(row.name)
            if cell is not None:
                for level, m in columns.items():
                    key_cell = cell + ((level,) if level else ())
                    values[key_cell] = dict(row.metrics[m].values)
                    names[key_cell] = f"{row.name}@{level}" if level else row.name
        design = Design(tuple(factors), values, names)
        comparisons = analyze(design, confidence)
        by_name = {row.name: row for row in rows}
        for level, m in columns.items() if extras else ():
            comparisons += flat_comparisons(
                {n: dict(by_name[n].metrics[m].values) for n in [sweep.baseline, *extras]},
                sweep.baseline,
                confidence,
                f"{split.name}={level}" if level else "",
            )
        tables.append(MetricTable(key or metric, columns, design, tuple(with_holm(comparisons))))
    return tables
