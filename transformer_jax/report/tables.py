"""Renders variant summaries as a Markdown table, CSV files and a LaTeX (booktabs) table.

Every rendering shows, per metric, mean +- sample std over finished seeds with n, and the
difference from the baseline paired by seed with its confidence interval, marked "*" when the
interval excludes zero; then parameter count, throughput, wall time and run outcome counts.
"""

import csv
import io
import json
import math
from collections.abc import Sequence

from transformer_jax.report.run_dirs import RunRecord
from transformer_jax.report.summary import MetricSummary, VariantSummary

SIGNIFICANT = "*"


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


def format_diff(m: MetricSummary, digits: int) -> str:
    """e.g. "+0.012 [+0.004, +0.020]* (n=3)": paired difference, CI, marker, pairs used."""
    d = m.diff
    if d is None:
        return "baseline"
    if d.n == 0:
        return "– (no paired seeds)"
    if d.n == 1:
        return f"{_num(d.mean, digits, sign=True)} (n=1, no CI)"
    marker = SIGNIFICANT if d.excludes_zero else ""
    return (
        f"{_num(d.mean, digits, sign=True)} [{_num(d.low, digits, sign=True)}, "
        f"{_num(d.high, digits, sign=True)}]{marker} (n={d.n})"
    )


def markdown_table(
    rows: Sequence[VariantSummary], metrics: Sequence[str], digits: int = 3, confidence=0.95
) -> str:
    """The main results table in GitHub Markdown."""
    header = ["Variant"]
    for m in metrics:
        header += [f"{m} mean ± std", f"Δ {m} [{confidence:.0%} CI]"]
    header += ["Params", "Tokens/s", "Wall time", "Finished", "Diverged", "Failed", "Missing"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        name = f"**{row.name}** (baseline)" if row.is_baseline else row.name
        cells = [name]
        for m in metrics:
            cells += [format_mean_std(row.metrics[m], digits), format_diff(row.metrics[m], digits)]
        cells += [
            format_params(row.num_params),
            format_rate(row.tokens_per_sec),
            format_seconds(row.wall_time_s),
            str(row.n_finished),
            str(row.n_diverged),
            str(row.n_failed),
            str(row.n_missing),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
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


def results_csv(rows: Sequence[VariantSummary], metrics: Sequence[str]) -> str:
    """One row per variant with full-precision numbers; empty cells for undefined values."""
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
                record += ["", "", "", "", ""]
            else:
                record += [
                    _csv_float(d.mean),
                    _csv_float(d.low),
                    _csv_float(d.high),
                    d.n,
                    d.excludes_zero,
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
            if d is None:
                cells.append("--")
            elif d.n < 2:
                cells.append("--" if d.n == 0 else f"${_num(d.mean, digits, sign=True)}$")
            else:
                marker = "^{*}" if d.excludes_zero else ""
                cells.append(
                    f"${_num(d.mean, digits, sign=True)}{marker}$ "
                    f"[${_num(d.low, digits, sign=True)}$, ${_num(d.high, digits, sign=True)}$]"
                )
        cells += [
            latex_escape(format_params(row.num_params)).replace("–", "--"),
            format_rate(row.tokens_per_sec).replace(",", "{,}").replace("–", "--"),
            f"{row.n_diverged}/{row.n_failed}",
        ]
        body.append(" & ".join(cells) + r" \\")
    caption = caption or (
        f"Mean $\\pm$ sample std over $n$ finished seeds; $\\Delta$: difference from the baseline "
        f"paired by seed, {confidence:.0%} $t$ interval; $^{{*}}$: interval excludes 0."
    ).replace("%", r"\%")
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
