"""Renders variant summaries as Markdown tables, CSV files and a LaTeX (booktabs) table.

The report shows one Markdown table per metric (mean +- sample std over finished seeds with n,
the difference from the baseline paired by seed with its confidence interval, marked "*" when
the interval excludes zero and "†" when it survives Holm's correction across the table, and the
Holm-adjusted p-value) and one table of cost and run outcomes. The wide table of every metric at
once is results.csv (full precision) and table.tex.
"""

import csv
import io
import json
import math
from collections.abc import Sequence

from transformer_jax.report import stats
from transformer_jax.report.summary import MetricSummary, VariantSummary
from transformer_jax.sweep_dir import RunRecord

SIGNIFICANT = "*"  # the unadjusted confidence interval excludes 0
HOLM = "†"  # the difference survives Holm's correction across its table


def _num(x: float, digits: int, sign: bool = False) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:{'+' if sign else ''}.{digits}f}"


def format_params(counts: Sequence[int]) -> str:
    """Parameter count as 1.23M / 45.6K; a range when seeds disagree (should not happen)."""

    def one(n: int) -> str:
        for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
            if n >= scale:
                return f"{n / scale:.3g}{suffix}"
        return str(n)

    if not counts:
        return "–"
    return one(counts[0]) if len(counts) == 1 else f"{one(counts[0])}–{one(counts[-1])}"


def format_seconds(s: float) -> str:
    if math.isnan(s):
        return "–"
    if s < 120:
        return f"{s:.1f} s"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def format_rate(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:,.0f}"


def format_mean_std(m: MetricSummary, digits: int) -> str:
    """e.g. "0.981 ± 0.004 (n=3)"; no std for a single seed."""
    if m.n == 0:
        return "– (n=0)"
    if m.n == 1:
        return f"{_num(m.mean, digits)} (n=1)"
    return f"{_num(m.mean, digits)} ± {_num(m.std, digits)} (n={m.n})"


def format_paired(d: stats.PairedDifference | None, digits: int, holm: bool = False) -> str:
    """e.g. "+0.012 [+0.004, +0.020]*† (n=3)": paired difference, CI, markers, pairs used.

    holm: whether the difference survives Holm's correction (adds HOLM after SIGNIFICANT).
    """
    if d is None:
        return "baseline"
    if d.n == 0:
        return "– (no paired seeds)"
    if d.n == 1:
        return f"{_num(d.mean, digits, sign=True)} (n=1, no CI)"
    marker = (SIGNIFICANT if d.excludes_zero else "") + (HOLM if holm else "")
    return (
        f"{_num(d.mean, digits, sign=True)} [{_num(d.low, digits, sign=True)}, "
        f"{_num(d.high, digits, sign=True)}]{marker} (n={d.n})"
    )


def survives_holm(p_holm: float, confidence: float) -> bool:
    """Whether a Holm-adjusted p-value is within the family-wise error rate 1 - confidence."""
    return not math.isnan(p_holm) and p_holm <= 1.0 - confidence + 1e-12


def format_diff(m: MetricSummary, digits: int, confidence: float = 0.95) -> str:
    """A metric's difference from the baseline (format_paired), † from its Holm p-value."""
    return format_paired(m.diff, digits, survives_holm(m.p_holm, confidence))


def format_p(p: float) -> str:
    """A p-value with two significant digits; "<0.001" below that."""
    if p is None or math.isnan(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.2g}" if p < 0.01 else f"{p:.3f}".rstrip("0").rstrip(".")


def holm_note(m: int, confidence: float, against_baseline: bool = True) -> str:
    """The sentence under a table that says what * and † mean and how large † 's family is."""
    if m == 0:
        return (
            "No difference in this table has two or more paired seeds, so none is tested "
            f"(no {HOLM})."
        )
    noun = "comparison" + ("s" if m != 1 else "")
    if against_baseline:
        noun += " with the baseline"
    return (
        f"`{SIGNIFICANT}`: the unadjusted {confidence:.0%} CI excludes 0. {HOLM}: the difference "
        f"survives Holm's correction over this table's family of {m} {noun} that "
        f"{'have' if m != 1 else 'has'} a p-value (family-wise error rate {1 - confidence:.0%}); "
        "Holm p is the Holm-adjusted p-value of the paired t-test."
    )


def metric_table(
    rows: Sequence[VariantSummary], metric: str, digits: int = 3, confidence: float = 0.95
) -> str:
    """One metric of a flat sweep: mean ± std per variant, the difference from the baseline
    paired by seed with its CI, and the Holm-adjusted p-value, with the note on †."""
    baseline = next((row.name for row in rows if row.is_baseline), "")
    header = ["Variant", "Mean ± std (n)", f"Δ vs `{baseline}` [{confidence:.0%} CI]", "Holm p"]
    lines = ["| " + " | ".join(header) + " |", "|---|---|---|---|"]
    for row in rows:
        s = row.metrics[metric]
        cells = [
            f"**{row.name}** (baseline)" if row.is_baseline else row.name,
            format_mean_std(s, digits),
            format_diff(s, digits, confidence),
            "" if row.is_baseline else format_p(s.p_holm),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    m = stats.family_size([row.metrics[metric].p_holm for row in rows])
    return "\n".join(lines) + "\n\n" + holm_note(m, confidence) + "\n"


def cost_table(rows: Sequence[VariantSummary]) -> str:
    """Parameters, throughput, wall time and run outcomes per variant."""
    header = ["Variant", "Params", "Tokens/s", "Wall time", "Finished", "Diverged", "Failed"]
    header += ["Missing"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [
            f"**{row.name}** (baseline)" if row.is_baseline else row.name,
            format_params(row.num_params),
            format_rate(row.tokens_per_sec),
            format_seconds(row.wall_time_s),
            str(row.n_finished),
            str(row.n_diverged),
            str(row.n_failed),
            str(row.n_missing),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def runs_markdown_table(runs: Sequence[RunRecord], metrics: Sequence[str], digits: int = 3) -> str:
    """Every run, one line each: the raw numbers behind the aggregated table."""
    header = ["Variant", "Seed", "Status", "Step", *metrics, "Tokens/s", "Wall time", "Directory"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in runs:
        values = [r.metric(m) for m in metrics]
        cells = [
            r.variant,
            str(r.seed),
            r.status,
            "–" if r.step is None else str(r.step),
            *("–" if v is None else _num(v, digits) for v in values),
            format_rate(math.nan if r.tokens_per_sec is None else r.tokens_per_sec),
            format_seconds(math.nan if r.wall_time_s is None else r.wall_time_s),
            f"`{r.variant}/seed_{r.seed}`",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _csv_float(x: float | None) -> str:
    return "" if x is None or math.isnan(x) else repr(float(x))


def results_csv(
    rows: Sequence[VariantSummary], metrics: Sequence[str], confidence: float = 0.95
) -> str:
    """One row per variant with full-precision numbers (every metric: mean, std, n, the paired
    difference from the baseline with its CI, p-value and Holm-adjusted p-value); empty cells
    for undefined values."""
    header = ["variant", "is_baseline", "overrides", "n_finished", "n_diverged", "n_failed"]
    header += ["n_missing", "num_params", "tokens_per_sec", "wall_time_s"]
    for m in metrics:
        header += [
            f"{m}:mean",
            f"{m}:std",
            f"{m}:n",
            f"{m}:diff",
            f"{m}:ci_low",
            f"{m}:ci_high",
            f"{m}:n_paired",
            f"{m}:significant",
            f"{m}:p",
            f"{m}:p_holm",
            f"{m}:survives_holm",
        ]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        record = [
            row.name,
            row.is_baseline,
            json.dumps(dict(row.overrides), sort_keys=True, default=list),
            row.n_finished,
            row.n_diverged,
            row.n_failed,
            row.n_missing,
            row.num_params[0] if len(row.num_params) == 1 else "",
            _csv_float(row.tokens_per_sec),
            _csv_float(row.wall_time_s),
        ]
        for m in metrics:
            s = row.metrics[m]
            d = s.diff
            record += [_csv_float(s.mean), _csv_float(s.std), s.n]
            if d is None:
                record += ["", "", "", "", "", "", "", ""]
            else:
                record += [
                    _csv_float(d.mean),
                    _csv_float(d.low),
                    _csv_float(d.high),
                    d.n,
                    d.excludes_zero,
                    _csv_float(d.p_value),
                    _csv_float(s.p_holm),
                    survives_holm(s.p_holm, confidence),
                ]
        writer.writerow(record)
    return out.getvalue()


def runs_csv(runs: Sequence[RunRecord], metrics: Sequence[str]) -> str:
    """One row per (variant, seed) run, for re-analysis elsewhere."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["variant", "seed", "status", "step", *metrics, "num_params", "tokens_per_sec"]
        + ["wall_time_s", "git_commit", "error"]
    )
    for r in runs:
        writer.writerow(
            [r.variant, r.seed, r.status, "" if r.step is None else r.step]
            + [_csv_float(r.metric(m)) for m in metrics]
            + ["" if r.num_params is None else r.num_params, _csv_float(r.tokens_per_sec)]
            + [_csv_float(r.wall_time_s), r.git_commit or "", r.error or ""]
        )
    return out.getvalue()


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def latex_paired(d: stats.PairedDifference, digits: int, holm: bool) -> str:
    """A paired difference in LaTeX: "$+0.050^{*\\dagger}$ [$+0.025$, $+0.075$]"; no interval
    for fewer than two seeds, "--" for none."""
    if d.n == 0:
        return "--"
    if d.n < 2:
        return f"${_num(d.mean, digits, sign=True)}$"
    marker = ("*" if d.excludes_zero else "") + (r"\dagger" if holm else "")
    marker = f"^{{{marker}}}" if marker else ""
    return (
        f"${_num(d.mean, digits, sign=True)}{marker}$ "
        f"[${_num(d.low, digits, sign=True)}$, ${_num(d.high, digits, sign=True)}$]"
    )


def latex_float(cols: str, header: Sequence[str], body: Sequence[str], caption: str) -> str:
    """A booktabs table float around header and body rows (needs \\usepackage{booktabs})."""
    return "\n".join(
        [
            r"\begin{table}[t]",
            r"\centering",
            r"\small",
            f"\\begin{{tabular}}{{{cols}}}",
            r"\toprule",
            " & ".join(header) + r" \\",
            r"\midrule",
            *body,
            r"\bottomrule",
            r"\end{tabular}",
            f"\\caption{{{caption}}}",
            r"\end{table}",
            "",
        ]
    )


def latex_table(
    rows: Sequence[VariantSummary],
    metrics: Sequence[str],
    digits: int = 3,
    confidence: float = 0.95,
    caption: str = "",
) -> str:
    """A booktabs table for a paper (needs \\usepackage{booktabs})."""
    cols = "lr" + "rr" * len(metrics) + "rrr"
    header = ["Variant", "$n$"]
    for m in metrics:
        header += [latex_escape(m), f"$\\Delta$ [{confidence:.0%} CI]".replace("%", r"\%")]
    header += ["Params", "Tokens/s", "Div./failed"]
    body = []
    for row in rows:
        cells = [
            latex_escape(row.name) + (" (base)" if row.is_baseline else ""),
            str(row.n_finished),
        ]
        for m in metrics:
            s = row.metrics[m]
            if s.n == 0:
                cells.append("--")
            elif s.n == 1:
                cells.append(f"${_num(s.mean, digits)}$")
            else:
                cells.append(f"${_num(s.mean, digits)} \\pm {_num(s.std, digits)}$")
            d = s.diff
            holm = survives_holm(s.p_holm, confidence)
            cells.append("--" if d is None else latex_paired(d, digits, holm))
        cells += [
            latex_escape(format_params(row.num_params)).replace("–", "--"),
            format_rate(row.tokens_per_sec).replace(",", "{,}").replace("–", "--"),
            f"{row.n_diverged}/{row.n_failed}",
        ]
        body.append(" & ".join(cells) + r" \\")
    caption = caption or (
        f"Mean $\\pm$ sample std over $n$ finished seeds; $\\Delta$: difference from the baseline "
        f"paired by seed, {confidence:.0%} $t$ interval; $^{{*}}$: interval excludes 0; "
        f"$^{{\\dagger}}$: survives Holm's correction across the column's differences."
    ).replace("%", r"\%")
    return latex_float(cols, header, body, caption)
