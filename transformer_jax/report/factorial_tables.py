"""Renders a factorial sweep's analysis (report/factorial.py): per metric a table of the cells and
a table of the effects, the factor definitions, effects.csv at full precision and the LaTeX
table of the effects (the sweep's table.tex)."""

import csv
import io
import math
from collections.abc import Sequence

from transformer_jax.report import stats
from transformer_jax.report.factorial import FLAT, INTERACTION, MARGINAL, SIMPLE, MetricTable
from transformer_jax.report.summary import VariantSummary
from transformer_jax.report.tables import (
    _csv_float,
    format_mean_std,
    format_p,
    format_paired,
    holm_note,
    latex_escape,
    latex_float,
    latex_paired,
    survives_holm,
)
from transformer_jax.sweep.factors import Factor
from transformer_jax.sweep.spec import Sweep, format_override

EFFECTS_CSV = "effects.csv"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def cells_table(
    sweep: Sweep, rows: Sequence[VariantSummary], table: MetricTable, digits: int = 3
) -> str:
    """Mean ± std (n) of every variant, its levels in columns; across the split factor one
    column per split."""
    factors = sweep.trained_factors
    header = ["Variant", *(f.name for f in factors)]
    header += [
        f"{level} (`{metric}`)" if level else "Mean ± std (n)"
        for level, metric in table.columns.items()
    ]
    lines = [_row(header), "|" + "---|" * len(header)]
    for row in rows:
        cell = sweep.cell_of(row.name)
        name = f"**{row.name}** (reference)" if row.is_baseline else row.name
        levels = list(cell) if cell is not None else ["–"] * len(factors)
        means = [format_mean_std(row.metrics[m], digits) for m in table.columns.values()]
        lines.append(_row([name, *levels, *means]))
    return "\n".join(lines) + "\n"


def effects_table(table: MetricTable, digits: int = 3, confidence: float = 0.95) -> str:
    """The table's comparisons with their CIs and Holm p-values, then the note on † and on the
    comparisons that need cells without finished runs."""
    shown = [c for c in table.comparisons if c.diff.n > 0]
    lines = []
    if shown:
        held = any(c.held_fixed for c in shown)
        header = ["Effect", *(["Held fixed"] if held else []), f"Δ [{confidence:.0%} CI]"]
        header.append("Holm p")
        lines = [_row(header), "|" + "---|" * len(header)]
        for c in shown:
            holm = survives_holm(c.p_holm, confidence)
            cells = [c.label, *([c.held_fixed or "–"] if held else [])]
            cells += [format_paired(c.diff, digits, holm), format_p(c.p_holm)]
            lines.append(_row(cells))
        lines.append("")
    m = stats.family_size([c.p_holm for c in table.comparisons])
    kinds = {c.kind for c in shown}
    parts = ["Each Δ is paired by seed"]
    if SIMPLE in kinds:
        parts.append(" between two cells that differ only in the named factor (simple effect)")
    if INTERACTION in kinds:
        parts.append(
            "; an interaction `(b − b0) at A=a minus at A=a0` is, per seed, the difference of "
            "the simple effect of B at A=a and at A=a0"
        )
    if MARGINAL in kinds:
        parts.append("; a marginal effect averages the simple effects per seed over the others")
    if FLAT in kinds:
        parts.append("; a variant outside the grid is compared with the reference cell")
    lines.append("".join(parts) + ". " + holm_note(m, confidence, against_baseline=False))
    untrained = [
        table.design.name(cell) for cell, values in table.design.values.items() if not values
    ]
    lacking = [c for c in table.comparisons if c.diff.n == 0]
    if lacking:
        lines += [
            "",
            f"Not estimable yet: {len(lacking)} more comparison"
            + ("s need" if len(lacking) != 1 else " needs")
            + " a cell without finished runs"
            + (f" ({', '.join(f'`{n}`' for n in untrained)})" if untrained else "")
            + ".",
        ]
    return "\n".join(lines) + "\n"


def factors_section(sweep: Sweep) -> list[str]:
    """Markdown lines: every factor, its levels (flags) and reference; the cells trained."""
    lines = []
    for f in sweep.factors:
        if isinstance(f, Factor):
            levels = [
                f"`{level}`"
                + (" (reference)" if level == f.reference else "")
                + ": "
                + (
                    " ".join(f"`--config.{k}={format_override(v)}`" for k, v in o.items())
                    or "base config"
                )
                for level, o in f.levels.items()
            ]
            lines.append(f"- `{f.name}` (trained): " + "; ".join(levels))
        else:
            levels = [
                f"`{level}`" + (" (reference)" if level == f.reference else "") + f": split `{s}`"
                for level, s in f.levels.items()
            ]
            lines.append(f"- `{f.name}` (evaluated on the same runs): " + "; ".join(levels))
    grid = math.prod(len(f.levels) for f in sweep.trained_factors)
    lines.append(
        f"- Cells in the sweep: {len(sweep.cells)} of the {grid} in the full grid"
        + (" (balanced: marginal effects are shown)" if len(sweep.cells) == grid else "")
        + "; the same seeds in every cell."
    )
    return lines


def effects_csv(tables: Sequence[MetricTable], confidence: float = 0.95) -> str:
    """Every comparison of every table at full precision, with its contrast's terms."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["metric", "kind", "factors", "effect", "held_fixed", "diff", "ci_low", "ci_high"]
        + ["n_paired", "p", "p_holm", "family_size", "significant", "survives_holm", "terms"]
    )
    for table in tables:
        m = stats.family_size([c.p_holm for c in table.comparisons])
        for c in table.comparisons:
            d = c.diff
            writer.writerow(
                [table.title, c.kind, " x ".join(c.factors), c.effect, c.held_fixed]
                + [_csv_float(d.mean), _csv_float(d.low), _csv_float(d.high), d.n]
                + [_csv_float(d.p_value), _csv_float(c.p_holm), m, d.excludes_zero]
                + [survives_holm(c.p_holm, confidence)]
                + [" ".join(f"{coef:+g}*{name}" for coef, name in c.terms)]
            )
    return out.getvalue()


def _latex_text(text: str) -> str:
    return latex_escape(text).replace("−", "$-$").replace("×", r"$\times$")


def latex_effects_table(
    tables: Sequence[MetricTable], digits: int = 3, confidence: float = 0.95
) -> str:
    """A booktabs table of every estimable comparison, one block per metric (needs
    \\usepackage{booktabs}); a factorial sweep's table.tex."""
    body = []
    for table in tables:
        shown = [c for c in table.comparisons if c.diff.n > 0]
        if not shown:
            continue
        body += [
            r"\midrule",
            rf"\multicolumn{{4}}{{l}}{{\textit{{{_latex_text(table.title)}}}}} \\",
        ]
        for c in shown:
            delta = latex_paired(c.diff, digits, survives_holm(c.p_holm, confidence))
            p = format_p(c.p_holm).replace("–", "--").replace("<", "$<$")
            cells = [_latex_text(c.label), _latex_text(c.held_fixed) or "--", delta, p]
            body.append(" & ".join(cells) + r" \\")
    caption = (
        f"Effects, each paired by seed between cells that differ only in the named factor "
        f"(interactions: difference of two such differences), {confidence:.0%} $t$ interval; "
        "$^{*}$: interval excludes 0; $^{\\dagger}$: survives Holm's correction across the "
        "comparisons of its metric; Holm $p$: Holm-adjusted $p$-value."
    ).replace("%", r"\%")
    header = ["Effect", "Held fixed", f"$\\Delta$ [{confidence:.0%} CI]".replace("%", r"\%")]
    return latex_float("llrr", [*header, "Holm $p$"], body[1:], caption)
