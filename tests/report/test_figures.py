"""Every figure of a small report, drawn as the report draws it: no text outside the canvas, no
two texts on top of each other; the forest plot shows the tables' own numbers."""

import csv
import errno
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text
from run_dir_fixtures import write_run, write_sweep_json

from transformer_jax.report import plots
from transformer_jax.report.report import write_report
from transformer_jax.sweep import Factor, Sweep

FLAT = Sweep(
    config="configs/algorithmic.py",
    variants={
        "base": {},
        "no_scale": {"model.attention.scale": "none"},
        "a_much_longer_variant_name": {"model.d_model": 64},
    },
    seeds=(0, 1, 2),
    metrics=("test/seq_accuracy", "test/loss"),
    baseline="base",
    equivalence_margins={"test/loss": 0.05},
)

FACTORIAL = Sweep(
    config="configs/algorithmic.py",
    factors=(
        Factor("d_k", {"dk16": {}, "dk64": {"model.attention.num_heads": 1}}),
        Factor("scale", {"sqrt_dk": {}, "none": {"model.attention.scale": "none"}}),
    ),
    seeds=(0, 1, 2),
    metrics=("test/seq_accuracy",),
    equivalence_margins={"test/seq_accuracy": 0.01},
)


def metrics(acc: float, loss: float) -> dict:
    return {"test": {"seq_accuracy": acc, "loss": loss}}


@pytest.fixture
def drawn(monkeypatch):
    """file name -> Figure of every figure a report writes (still written to disk)."""
    figures = {}
    save = plots._save

    def keep(fig, path):
        figures[os.path.basename(path)] = fig
        save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return figures


def flat_report(workdir: str) -> str:
    write_sweep_json(workdir, FLAT)
    for seed in FLAT.seeds:
        write_run(workdir, "base", seed, "finished", metrics(0.80 + 0.01 * seed, 1.0))
        write_run(
            workdir,
            "a_much_longer_variant_name",
            seed,
            "finished",
            metrics(0.90 + 0.012 * seed, 1.01 + 0.01 * seed),
        )
    write_run(workdir, "no_scale", 0, "finished", metrics(0.70, 1.3))
    write_run(workdir, "no_scale", 1, "finished", metrics(0.72, 1.2))
    write_run(workdir, "no_scale", 2, "diverged", metrics(0.1, 9.0), losses=(2.0, float("inf")))
    return write_report(workdir)


def factorial_report(workdir: str) -> str:
    write_sweep_json(workdir, FACTORIAL)
    shift = {"dk16_sqrt_dk": 0.0, "dk16_none": -0.1, "dk64_sqrt_dk": 0.02, "dk64_none": -0.6}
    for i, name in enumerate(FACTORIAL.variants):
        for seed in FACTORIAL.seeds:
            acc = 0.9 + shift[name] + 0.004 * ((seed + i) % 3) + 0.001 * seed * i
            write_run(workdir, name, seed, "finished", metrics(acc, 1.0))
    return write_report(workdir)


def visible_texts(fig: Figure) -> list[Text]:
    """The texts a drawn figure shows: visible, not empty, and for tick labels only those of
    ticks inside the axis' view (matplotlib keeps others it does not draw)."""
    fig.canvas.draw()
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if not low - 1e-9 * (high - low) <= tick.get_loc() <= high + 1e-9 * (high - low):
                    hidden.update((tick.label1, tick.label2))
    return [
        t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t not in hidden
    ]


def problems(fig: Figure) -> list[str]:
    """Texts that lie (partly) outside the figure's canvas, or overlap another text."""
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in visible_texts(fig)]
    found = []
    for text, box in boxes:
        inside = canvas.x0 - 0.5 <= box.x0 and box.x1 <= canvas.x1 + 0.5
        inside &= canvas.y0 - 0.5 <= box.y0 and box.y1 <= canvas.y1 + 0.5
        if not inside:
            found.append(f"outside the canvas: {text!r}")
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1 :]:
            overlap_x = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            overlap_y = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if overlap_x > 1.0 and overlap_y > 1.0:
                found.append(f"overlapping: {a!r} and {b!r}")
    return found


def test_every_figure_of_a_flat_report_keeps_its_text_inside(tmp_path, drawn):
    report = Path(flat_report(str(tmp_path / "flat"))).read_text()
    expected = {
        "forest_test_seq_accuracy.png",
        "forest_test_loss.png",
        "bars_test_seq_accuracy.png",
        "curves_train_loss.png",
        "curves_test_seq_accuracy.png",
        "curves_test_loss.png",
    }
    assert set(drawn) == expected
    for name, fig in drawn.items():
        assert problems(fig) == [], name
        assert f"]({name})" in report, f"report.md does not link {name}"
        assert os.path.isfile(tmp_path / "flat" / name)


def test_every_figure_of_a_factorial_report_keeps_its_text_inside(tmp_path, drawn):
    report = Path(factorial_report(str(tmp_path / "grid"))).read_text()
    assert "forest_test_seq_accuracy.png" in drawn
    for name, fig in drawn.items():
        assert problems(fig) == [], name
        assert f"]({name})" in report
    # Each effect of the effects table is a row, held-fixed levels named.
    fig = drawn["forest_test_seq_accuracy.png"]
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any("scale: none − sqrt_dk [d_k=dk64]" in label for label in labels), labels


def test_a_clipped_figure_is_caught():
    fig = Figure(figsize=(3, 2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title("a title far too long for a figure three inches wide, cut off at both ends")
    assert any(p.startswith("outside the canvas") for p in problems(fig))
    fig = Figure(figsize=(4, 3), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, "n=3", ha="center")
    ax.text(0.5, 0.5, "(baseline)", ha="center")
    assert problems(fig) == ["overlapping: 'n=3' and '(baseline)'"]


def results(workdir) -> dict[str, dict]:
    with open(os.path.join(workdir, "results.csv")) as f:
        return {row["variant"]: row for row in csv.DictReader(f)}


def test_the_forest_plot_shows_the_tables_numbers(tmp_path, drawn):
    """Each variant's marker at results.csv's Δ, its bar spanning the CI; filled where the
    difference survives Holm; the loss plot shades the declared margin."""
    workdir = tmp_path / "flat"
    flat_report(str(workdir))
    rows = results(workdir)
    for metric in FLAT.metrics:
        fig = drawn[f"forest_{metric.replace('/', '_')}.png"]
        ax = fig.axes[0]
        labels = [t.get_text() for t in ax.get_yticklabels()]
        markers = [
            line for line in ax.get_lines() if line.get_marker() == "o" and len(line.get_xdata())
        ]
        assert len(markers) == len(labels) == 2
        # Rows top to bottom in table order: the highest y first.
        markers.sort(key=lambda line: -line.get_ydata()[0])
        for label, line in zip(labels, markers, strict=True):
            name = label.split(" ")[0]
            row = rows[name]
            assert line.get_xdata()[0] == pytest.approx(float(row[f"{metric}:diff"]))
            holm = row[f"{metric}:survives_holm"] == "True"
            assert label.endswith("†") == holm
            filled = to_rgba(line.get_markerfacecolor()) != to_rgba("white")
            assert filled == holm
        caps = [c for c in ax.collections if len(c.get_segments())]
        spans = np.concatenate([np.array(c.get_segments())[:, :, 0] for c in caps])
        for name in ("no_scale", "a_much_longer_variant_name"):
            ci = [float(rows[name][f"{metric}:ci_{end}"]) for end in ("low", "high")]
            assert any(np.allclose(sorted(s), ci) for s in spans), name
        shaded = list(ax.patches)
        margin = FLAT.equivalence_margins.get(metric)
        assert bool(shaded) == (margin is not None)
        if margin is not None:
            (span,) = shaded
            edges = (span.get_x(), span.get_x() + span.get_width())
            assert edges == pytest.approx((-margin, margin))
    legend = [t.get_text() for t in drawn["forest_test_loss.png"].legends[0].get_texts()]
    assert legend[-1] == "equivalence margin ±0.05"
    assert isinstance(drawn["forest_test_loss.png"].legends[0].legend_handles[0], Line2D)


def test_curves_say_what_their_band_is(tmp_path, drawn):
    flat_report(str(tmp_path / "flat"))
    legend = drawn["curves_test_seq_accuracy.png"].axes[0].get_legend()
    assert legend.get_title().get_text().startswith("mean over finished seeds, band = min–max")
    assert "dotted = diverged runs" in legend.get_title().get_text()


def curve_data(fig: Figure) -> list[tuple[list, list]]:
    return [(list(line.get_xdata()), list(line.get_ydata())) for line in fig.axes[0].get_lines()]


def test_curves_come_back_from_the_record_without_run_directories(tmp_path, drawn):
    """A committed sweep keeps its runs' metrics.jsonl in runs.jsonl: with the run directories
    gone, the report draws the same curves from it."""
    workdir = tmp_path / "flat"
    flat_report(str(workdir))
    before = {name: curve_data(fig) for name, fig in drawn.items() if name.startswith("curves_")}
    assert (workdir / "runs.jsonl").is_file()
    for variant in FLAT.variants:
        shutil.rmtree(workdir / variant)
    drawn.clear()
    write_report(str(workdir))
    after = {name: curve_data(fig) for name, fig in drawn.items() if name.startswith("curves_")}
    assert after == before and len(after) == 3


def test_a_figure_that_meets_a_full_disk_is_named_and_the_old_one_kept(tmp_path, monkeypatch):
    """A figure is written as the report's other files are: a full disk (an OSError naming no
    file, as a write's) is an error naming the PNG, and the figure already there is intact."""
    workdir = tmp_path / "flat"
    flat_report(str(workdir))
    before = {p.name: p.read_bytes() for p in workdir.glob("*.png")}
    fsync = os.fsync

    def full_for_figures(fd):
        name = os.readlink(f"/proc/self/fd/{fd}")  # an atomic write's temporary file
        if ".png" in name and name.endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", full_for_figures)
    with pytest.raises(OSError, match=r"No space left on device: '.*/flat/\w+\.png'"):
        write_report(str(workdir))
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in workdir.glob("*.png")} == before
    assert not list(workdir.glob("*.tmp"))
