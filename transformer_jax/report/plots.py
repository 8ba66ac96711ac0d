"""Report figures: forest plots of the differences from the baseline, learning curves per
variant, a bar chart of the main metric, metrics against test length, isolation plots.

Figures are built with matplotlib's object API (Figure + Agg canvas, no pyplot), so importing this
module changes no global backend state and works on headless machines. Every figure is written
by `_save`; a figure's width grows with its longest title or label so that no text is cut off
(tests/report/test_figures.py checks every text of every figure of a report lies inside it).
"""

import dataclasses
import io
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FormatStrFormatter

from transformer_jax.report import stats
from transformer_jax.report.summary import VariantSummary
from transformer_jax.run_dir import write_bytes
from transformer_jax.sweep_dir import RunRecord, read_curve

# Inches per character of a 10 pt label, a little over the mean glyph width of the default
# font: the room a figure leaves for its longest label or title.
_INCH_PER_CHAR = 0.085


def _new_figure(width: float = 7.0, height: float = 4.5) -> tuple[Figure, object]:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _width_for(texts: Sequence[str], at_least: float, extra: float = 1.0) -> float:
    """A figure width (inches) that holds the longest line of `texts` plus `extra` inches."""
    longest = max((len(line) for t in texts for line in t.splitlines()), default=0)
    return max(at_least, _INCH_PER_CHAR * longest + extra)


def _save(fig: Figure, path: str) -> None:
    """`fig` as PNG at `path`, written as the report's other files are (run_dir.write_bytes):
    the old figure or the new one, never half of one, and a full disk names the file
    (matplotlib's own write names none)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    write_bytes(path, buffer.getvalue())


def _aggregate(curves: Sequence[tuple[list[int], list[float]]]):
    """Mean, min and max over runs at each logged step (runs missing a step are skipped there).

    Returns steps [S] and mean/min/max [S] arrays over finite values.
    """
    by_step: dict[int, list[float]] = {}
    for steps, values in curves:
        for s, v in zip(steps, values, strict=True):
            if math.isfinite(v):
                by_step.setdefault(s, []).append(v)
    steps = np.array(sorted(by_step))
    vals = [np.array(by_step[s]) for s in steps]
    return (
        steps,
        np.array([v.mean() for v in vals]),
        np.array([v.min() for v in vals]),
        np.array([v.max() for v in vals]),
    )


def plot_curves(
    runs: Mapping[str, Sequence[RunRecord]],
    split: str,
    metric: str,
    path: str,
    baseline: str | None = None,
) -> bool:
    """Learning curve of split/metric vs step: per variant the mean over finished seeds with a
    min-max band, and each diverged run as a dotted line ending in an x.

    Returns False (writing nothing) when no run logged the metric at two steps or more.
    """
    labels = [f"{name} (n={len(records)}) [baseline]" for name, records in runs.items()]
    fig, ax = _new_figure(_width_for(labels, 7.0, extra=2.5))
    colors = [f"C{i % 10}" for i in range(len(runs))]
    longest = 0
    all_values = []
    for color, (name, records) in zip(colors, runs.items(), strict=True):
        finished = [read_curve(r.path, split, metric) for r in records if r.status == "finished"]
        finished = [c for c in finished if c[0]]
        if finished:
            steps, mean, lo, hi = _aggregate(finished)
            if len(steps):
                label = f"{name} (n={len(finished)})" + (" [baseline]" if name == baseline else "")
                # Markers when eval points are sparse, so short curves stay visible.
                marker = "o" if len(steps) <= 30 else None
                ax.plot(
                    steps,
                    mean,
                    color=color,
                    label=label,
                    lw=2 if name == baseline else 1.3,
                    marker=marker,
                    ms=3,
                )
                ax.fill_between(steps, lo, hi, color=color, alpha=0.2, lw=0)
                all_values += [*lo, *hi]
                longest = max(longest, len(steps))
        for r in records:
            if r.status != "diverged":
                continue
            steps, values = read_curve(r.path, split, metric)
            kept = [(s, v) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
            if kept:
                xs, ys = zip(*kept, strict=True)
                ax.plot(xs, ys, color=color, ls=":", lw=1)
                ax.plot(xs[-1:], ys[-1:], color=color, marker="x", ls="none")
                all_values += list(ys)
                longest = max(longest, len(xs))
    if longest < 2:  # nothing logged, or a single evaluation: no curve to show
        return False
    if metric == "loss" and min(all_values) > 0:
        ax.set_yscale("log")
        # Plain numbers instead of 2x10^0-style labels on the minor ticks of a short log range.
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
    ax.set_xlabel("step")
    ax.set_ylabel(f"{split} {metric}")
    diverged = any(r.status == "diverged" for records in runs.values() for r in records)
    ax.set_title(f"{split}/{metric} vs step")
    ax.grid(alpha=0.3)
    ax.legend(
        fontsize="small",
        title_fontsize="small",
        title="mean over finished seeds, band = min–max"
        + ("\ndotted = diverged runs" if diverged else ""),
    )
    _save(fig, path)
    return True


def plot_metric_bars(rows: Sequence[VariantSummary], metric: str, path: str) -> bool:
    """Bar per variant at the mean of metric, error bar = sample std, dots = individual seeds;
    under each variant's name its number of finished seeds (and of diverged or failed runs).

    Returns False (writing nothing) when no variant has a finished value.
    """
    if not any(row.metrics[metric].n for row in rows):
        return False
    labels = []
    for row in rows:
        failed = row.n_diverged + row.n_failed
        note = f"n={row.metrics[metric].n}" + (f", {failed} div/failed" if failed else "")
        labels.append("\n".join([row.name, *(["(baseline)"] if row.is_baseline else []), note]))
    title = f"{metric} per variant"
    caption = "mean ± sample std over seeds, dots = seeds"
    # Each label in a slot of its own width, so neighbours never overlap.
    slot = _width_for(labels, 1.2, extra=0.3)
    fig, ax = _new_figure(max(_width_for([title, caption], 4.0), slot * len(rows) + 1.5), 4.5)
    for i, row in enumerate(rows):
        s = row.metrics[metric]
        color = f"C{i % 10}"
        if s.n:
            ax.bar(
                i,
                s.mean,
                yerr=s.std if s.n > 1 else None,
                color=color,
                alpha=0.6,
                capsize=5,
                hatch="//" if row.is_baseline else None,
                edgecolor="black" if row.is_baseline else color,
            )
            ax.plot([i] * s.n, list(s.values.values()), "o", color="black", ms=3)
    ax.set_xticks(range(len(rows)), labels)
    ax.set_ylabel(metric)
    ax.set_title(f"{title}\n{caption}", fontsize="medium")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)
    return True


@dataclasses.dataclass(frozen=True)
class Interval:
    """One row of a forest plot: a comparison of the report's tables, its Δ with the CI the
    table prints and whether it survives Holm's correction across that table."""

    label: str
    diff: stats.PairedDifference
    holm: bool


def plot_forest(
    intervals: Sequence[Interval],
    metric: str,
    against: str,
    path: str,
    confidence: float = 0.95,
    margin: float | None = None,
) -> bool:
    """Forest plot of `metric`: one row per comparison (top to bottom in table order), its mean
    Δ with the `confidence` interval (a filled marker and † where it survives Holm, an open one
    where not, a cross without an interval: fewer than two paired seeds or no spread), a line
    at 0 and, with an equivalence `margin`, the band ±margin shaded. `against`: what each Δ is
    measured from.

    Returns False (writing nothing) without a comparison that has a paired seed.
    """
    shown = [i for i in intervals if i.diff.n > 0]
    if not shown:
        return False
    labels = [
        i.label + (" †" if i.holm else "") + ("" if _has_interval(i.diff) else " (no CI)")
        for i in shown
    ]
    title = f"{metric}: Δ vs {against}"
    x_label = f"Δ, mean paired by seed, {confidence:.0%} CI (Student's t)"
    width = _width_for(labels, 1.5, extra=0.0) + _width_for([title, x_label], 4.0, extra=0.5)
    fig, ax = _new_figure(width, 1.8 + 0.35 * len(shown))
    ys = list(range(len(shown) - 1, -1, -1))  # the first comparison on top
    for y, interval in zip(ys, shown, strict=True):
        d = interval.diff
        if not _has_interval(d):
            ax.plot([d.mean], [y], "x", color="C0", ms=7)
            continue
        ax.errorbar(
            [d.mean],
            [y],
            xerr=[[d.mean - d.low], [d.high - d.mean]],
            fmt="o",
            color="C0",
            mfc="C0" if interval.holm else "white",
            ms=6,
            capsize=4,
        )
    ax.axvline(0.0, color="black", lw=0.8)
    handles = [
        Line2D([], [], color="C0", marker="o", ls="none", label="survives Holm (†)"),
        Line2D([], [], color="C0", marker="o", mfc="white", ls="none", label="does not"),
    ]
    if not all(_has_interval(i.diff) for i in shown):
        handles.append(Line2D([], [], color="C0", marker="x", ls="none", label="no CI"))
    if margin is not None:
        ax.axvspan(-margin, margin, color="C2", alpha=0.15, lw=0)
        handles.append(Patch(color="C2", alpha=0.3, label=f"equivalence margin ±{margin:g}"))
    ax.set_yticks(ys, labels)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    ax.set_xlabel(x_label)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize="small")
    _save(fig, path)
    return True


def _has_interval(diff: stats.PairedDifference) -> bool:
    return diff.n >= 2 and math.isfinite(diff.low) and math.isfinite(diff.high)


LENGTH_SPLIT = re.compile(r"test_len(\d+)")  # data.test_lengths splits, see data/builders.py


def length_metrics(metrics: Sequence[str]) -> dict[str, dict[int, str]]:
    """metric name -> {test length: "test_len<L>/<name>"} over the sweep's metrics that read a
    test_lengths split; names with fewer than two lengths are left out (no curve)."""
    by_name: dict[str, dict[int, str]] = {}
    for full in metrics:
        split, _, name = full.partition("/")
        match = LENGTH_SPLIT.fullmatch(split)
        if match:
            by_name.setdefault(name, {})[int(match.group(1))] = full
    return {name: dict(sorted(d.items())) for name, d in by_name.items() if len(d) >= 2}


def plot_length_curve(
    rows: Sequence[VariantSummary],
    name: str,
    by_length: Mapping[int, str],
    path: str,
    train_length: int | None = None,
) -> bool:
    """Accuracy (or any metric) against test length, one line per variant: the mean over
    finished seeds with a min-max band; a dotted vertical line at the longest training length.

    Returns False (writing nothing) when no variant has a value at two lengths.
    """
    fig, ax = _new_figure()
    drawn = False
    for i, row in enumerate(rows):
        points = [(n, row.metrics[m]) for n, m in by_length.items() if row.metrics[m].n]
        if len(points) < 2:
            continue
        lengths = [n for n, _ in points]
        lows = [min(s.values.values()) for _, s in points]
        highs = [max(s.values.values()) for _, s in points]
        color = f"C{i % 10}"
        n_seeds = max(s.n for _, s in points)
        ax.plot(
            lengths,
            [s.mean for _, s in points],
            color=color,
            marker="o",
            ms=3,
            label=f"{row.name} (n={n_seeds})",
            lw=2 if row.is_baseline else 1.3,
        )
        ax.fill_between(lengths, lows, highs, color=color, alpha=0.15, lw=0)
        drawn = True
    if not drawn:
        return False
    if train_length:
        ax.axvline(train_length, color="grey", ls=":", lw=1, label="longest training length")
    ax.set_xlabel("test length (symbols)")
    ax.set_ylabel(name)
    ax.set_title(f"{name} against test length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", title="mean over seeds, band = min–max", title_fontsize="small")
    _save(fig, path)
    return True


_LINE_STYLES = ("-", "--", ":", "-.")


def plot_isolation(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    groups: Mapping[str, str],
    x_label: str,
    y_label: str,
    title: str,
    path: str,
) -> bool:
    """The Tuning Playbook's isolation plot: y_label (the selection metric) against x_label (a
    nuisance value, log axis), one line per variant of `curves` (variant -> [(x, y)]); variants
    of one `groups` value (the level of the scientific factor) share a colour, told apart by the
    line style. Returns False (writing nothing) when no variant has a point."""
    if not any(curves.values()):
        return False
    fig, ax = _new_figure()
    colours = {g: f"C{i % 10}" for i, g in enumerate(dict.fromkeys(groups.values()))}
    seen: dict[str, int] = {}
    for name, points in curves.items():
        if not points:
            continue
        group = groups[name]
        style = _LINE_STYLES[seen.get(group, 0) % len(_LINE_STYLES)]
        seen[group] = seen.get(group, 0) + 1
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, color=colours[group], ls=style, marker="o", ms=4, label=name)
    if all(x > 0 for points in curves.values() for x, _ in points):
        ax.set_xscale("log")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, path)
    return True
