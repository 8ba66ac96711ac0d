"""Report regeneration from synthetic run directories: numbers, counts, files, regenerability."""

import csv
import glob
import math
import os
import re
import shutil

import pytest
from run_dir_fixtures import write_run, write_sweep_json

from transformer_jax.report import plots, stats
from transformer_jax.report.report import write_report
from transformer_jax.sweep import Sweep

SWEEP = Sweep(
    config="configs/algorithmic.py",
    variants={
        "base": {},
        "no_scale": {"model.attention.scale": "none"},
        "wide": {"model.d_model": 64},
        "deep": {"model.num_encoder_layers": 4},
    },
    seeds=(0, 1, 2),
    metrics=("test/seq_accuracy", "test/loss"),
    baseline="base",
    description="Scaling attention logits matters for copy.",
)


def _acc(acc, loss=1.0):
    return {"test": {"seq_accuracy": acc, "loss": loss}, "train": {"loss": 0.5}}


@pytest.fixture
def sweep_dir(tmp_path):
    workdir = str(tmp_path / "sweep")
    write_sweep_json(workdir, SWEEP)
    for seed, acc in enumerate((0.80, 0.82, 0.84)):
        write_run(workdir, "base", seed, "finished", _acc(acc, 1.0 + 0.1 * seed))
    write_run(workdir, "no_scale", 0, "finished", _acc(0.85), tokens_per_sec=3000.0)
    # A diverged run's metrics must not enter the mean.
    write_run(workdir, "no_scale", 1, "diverged", _acc(0.10), losses=(2.0, float("inf")))
    write_run(workdir, "no_scale", 2, "failed")
    for seed, acc in enumerate((0.85, 0.86, 0.90)):
        write_run(workdir, "wide", seed, "finished", _acc(acc), wall_time_s=20.0 + seed)
    write_run(workdir, "deep", 0, "finished", _acc(0.70))
    write_run(workdir, "deep", 1, "incomplete")
    return workdir


def _read(*parts):
    with open(os.path.join(*parts)) as f:
        return f.read()


def _results(workdir):
    with open(os.path.join(workdir, "results.csv")) as f:
        return {row["variant"]: row for row in csv.DictReader(f)}


def test_results_csv_numbers(sweep_dir):
    write_report(sweep_dir)
    rows = _results(sweep_dir)
    assert list(rows) == ["base", "no_scale", "wide", "deep"]

    base = rows["base"]
    assert base["is_baseline"] == "True"
    assert float(base["test/seq_accuracy:mean"]) == pytest.approx(0.82)
    assert float(base["test/seq_accuracy:std"]) == pytest.approx(0.02)
    assert base["test/seq_accuracy:n"] == "3"
    assert base["test/seq_accuracy:diff"] == ""
    assert float(base["test/loss:std"]) == pytest.approx(0.1)

    # Paired differences 0.05, 0.04, 0.06 (hand computed in test_stats).
    wide = rows["wide"]
    half = 4.302653 * 0.01 / math.sqrt(3)
    assert float(wide["test/seq_accuracy:diff"]) == pytest.approx(0.05)
    assert float(wide["test/seq_accuracy:ci_low"]) == pytest.approx(0.05 - half, abs=1e-6)
    assert float(wide["test/seq_accuracy:ci_high"]) == pytest.approx(0.05 + half, abs=1e-6)
    assert wide["test/seq_accuracy:significant"] == "True"
    assert float(wide["wall_time_s"]) == pytest.approx(21.0)

    no_scale = rows["no_scale"]
    assert float(no_scale["test/seq_accuracy:mean"]) == pytest.approx(0.85)
    assert no_scale["test/seq_accuracy:n"] == "1"
    assert no_scale["test/seq_accuracy:std"] == ""
    assert (no_scale["n_finished"], no_scale["n_diverged"], no_scale["n_failed"]) == ("1", "1", "1")
    assert no_scale["test/seq_accuracy:n_paired"] == "1"
    assert float(no_scale["test/seq_accuracy:diff"]) == pytest.approx(0.05)
    assert no_scale["test/seq_accuracy:ci_low"] == ""
    assert no_scale["test/seq_accuracy:significant"] == "False"
    assert float(no_scale["tokens_per_sec"]) == 3000.0  # finished runs only

    deep = rows["deep"]
    assert (deep["n_finished"], deep["n_missing"]) == ("1", "2")
    assert deep["num_params"] == "12345"


def test_report_md_shows_every_run_and_outcome(sweep_dir):
    path = write_report(sweep_dir)
    text = _read(path)
    assert "Scaling attention logits matters for copy." in text
    assert "experiments/demo.py" in text
    assert "python -m transformer_jax.sweep --sweep=experiments/demo.py" in text
    assert "Git commit" in text and "`abc123`" in text
    assert "1 x cpu (cpu), 2 CPUs" in text
    assert "**base** (baseline)" in text
    assert "0.820 ± 0.020 (n=3)" in text
    assert "+0.050 [+0.025, +0.075]*† (n=3)" in text  # † survives Holm (family of 1)
    assert "+0.050 (n=1, no CI)" in text
    # Cost table row of no_scale: 1 finished, 1 diverged, 1 failed, 0 missing.
    cost = text.split("### Cost and outcomes")[1]
    row = next(line for line in cost.splitlines() if line.startswith("| no_scale |"))
    assert row.rstrip().endswith("| 1 | 1 | 1 | 0 |")
    assert "no_scale/seed_2 failed (return code 1): RuntimeError: boom" in text
    assert "no_scale/seed_1 diverged at step 10" in text
    assert "deep/seed_1 is incomplete" in text and "deep/seed_2 has not been run" in text
    assert "`--config.model.attention.scale=none`" in text
    for variant in SWEEP.variants:
        for seed in SWEEP.seeds:
            assert f"`{variant}/seed_{seed}`" in text  # every run listed, none dropped
    # Plots exist, are PNGs and are linked relatively.
    for name in (
        "bars_test_seq_accuracy.png",
        "curves_train_loss.png",
        "curves_test_seq_accuracy.png",
    ):
        assert f"]({name})" in text
        with open(os.path.join(sweep_dir, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_latex_and_runs_csv(sweep_dir):
    write_report(sweep_dir)
    tex = _read(sweep_dir, "table.tex")
    assert tex.startswith("\\begin{table}") and "\\toprule" in tex and "\\bottomrule" in tex
    assert "$0.820 \\pm 0.020$" in tex
    assert "$+0.050^{*\\dagger}$" in tex
    assert "no\\_scale" in tex and "test/seq\\_accuracy" in tex
    body = tex.split("\\midrule")[1].split("\\bottomrule")[0].strip().splitlines()
    assert len(body) == 4
    # Column spec matches the number of cells in each row.
    ncols = len(tex.split("\\begin{tabular}{")[1].split("}")[0])
    assert all(line.count("&") == ncols - 1 for line in body)

    with open(os.path.join(sweep_dir, "runs.csv")) as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 12
    statuses = {(r["variant"], r["seed"]): r["status"] for r in runs}
    assert statuses[("no_scale", "1")] == "diverged"
    assert statuses[("no_scale", "2")] == "failed"
    assert statuses[("deep", "2")] == "missing"


def test_report_is_regenerable(sweep_dir):
    write_report(sweep_dir)
    first = _read(sweep_dir, "results.csv")
    # A run finishing later changes the report on regeneration.
    write_run(sweep_dir, "deep", 1, "finished", _acc(0.72))
    write_report(sweep_dir)
    rows = _results(sweep_dir)
    assert rows["deep"]["test/seq_accuracy:n"] == "2"
    assert float(rows["deep"]["test/seq_accuracy:mean"]) == pytest.approx(0.71)
    assert _read(sweep_dir, "results.csv") != first


def _without_date(report: str) -> str:
    return re.sub(r"report written: \S+", "report written: DATE", report)


def test_a_folder_of_a_runs_csv_alone_rebuilds_again_after_its_sessions_are_written(
    sweep_dir, tmp_path
):
    """A results/ folder committed before records (sweep.json and runs.csv): its first rebuild
    writes each ended run's HParams session into a run directory of its own, which must not
    read as a run that trained there (0 finished runs, refused) at the next rebuild."""
    write_report(sweep_dir)
    committed = str(tmp_path / "committed")
    os.makedirs(committed)
    for name in ("sweep.json", "runs.csv"):
        shutil.copy(os.path.join(sweep_dir, name), committed)
    write_report(committed)
    # finished, diverged and failed runs: 3 base, 3 no_scale, 3 wide, 1 deep.
    sessions = sorted(
        os.path.relpath(p, committed)
        for p in glob.glob(os.path.join(committed, "*", "seed_*", "hparams.json"))
    )
    assert len(sessions) == 10 and os.path.join("deep", "seed_0", "hparams.json") in sessions
    first = _report_files(committed)
    write_report(committed)
    again = _report_files(committed)
    for name in ("runs.csv", "results.csv"):
        assert again[name] == first[name] == _read(sweep_dir, name), name
    assert _without_date(again["report.md"]) == _without_date(first["report.md"])
    assert "rebuilt from `runs.csv` without the run directories" in again["report.md"]
    assert again["report.md"].count("| finished |") == 8


def test_overrides_the_config_now_refuses_are_named_with_the_commit_they_ran_at(
    sweep_dir, tmp_path
):
    """A committed sweep of flat model fields (renamed by commit 92893b4): its Variants keep
    the flags it ran with; one line under the title names them, their current names and the
    commit of its runs. A sweep whose overrides the config accepts has no such line."""
    write_report(sweep_dir)
    assert "Overrides since renamed" not in _read(sweep_dir, "report.md")
    sweep = Sweep(
        config="configs/algorithmic.py",
        variants={
            "base": {},
            "flat": {"model.attention_scale": "none", "model.d_model": 64},
            "nested": {"model.attention.scale": "none", "model.positional": "none"},
        },
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
        baseline="base",
        description="Flat fields.",
    )
    workdir = str(tmp_path / "flat")
    write_sweep_json(workdir, sweep)
    for variant in sweep.variants:
        for seed in sweep.seeds:
            write_run(workdir, variant, seed, "finished", _acc(0.5), git_commit="a96aebdf" * 5)
    report = _read(write_report(workdir))
    lines = report.splitlines()
    assert lines[2] == (
        "> ⚠ **Overrides since renamed or removed**: `configs/algorithmic.py` as of this "
        "report's commit refuses `model.attention_scale` (now `model.attention.scale`), "
        "`model.positional` (now `model.positional.kind`); the Variants below give the "
        "overrides as the runs trained with them, at `a96aebdf`."
    )
    assert "- `flat`: `--config.model.attention_scale=none` `--config.model.d_model=64`" in lines


def test_missing_sweep_json_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="sweep.json"):
        write_report(str(tmp_path))


def test_metric_absent_from_summaries_is_noted(tmp_path):
    workdir = str(tmp_path)
    sweep = Sweep(
        config="configs/algorithmic.py",
        variants={"a": {}},
        seeds=(0,),
        metrics=("test/bleu",),
        baseline="a",
        description="d",
    )
    write_sweep_json(workdir, sweep)
    write_run(workdir, "a", 0, "finished", _acc(0.5))
    text = _read(write_report(workdir))
    assert "test/bleu is absent from summary.json of 1 finished run(s) of a" in text
    assert "available: test/loss, test/seq_accuracy, train/loss" in text


def test_a_metric_only_other_variants_log_is_one_short_note(tmp_path):
    """ACT's ponder time, say: the variants without it are named, not given every metric."""
    workdir = str(tmp_path)
    sweep = Sweep(
        config="configs/algorithmic.py",
        variants={"a": {}, "b": {}},
        seeds=(0,),
        metrics=("test/seq_accuracy", "test/ponder"),
        baseline="a",
        description="d",
    )
    write_sweep_json(workdir, sweep)
    write_run(workdir, "a", 0, "finished", _acc(0.5))
    write_run(workdir, "b", 0, "finished", {"test": {"seq_accuracy": 0.6, "ponder": 3.0}})
    text = _read(write_report(workdir))
    assert "test/ponder is not logged by a (other variants log it)" in text
    assert "available:" not in text


def test_curve_aggregation_mean_min_max():
    curves = [([0, 10, 20], [3.0, 2.0, 1.0]), ([0, 10], [5.0, float("nan")])]
    steps, mean, lo, hi = plots._aggregate(curves)
    assert steps.tolist() == [0, 10, 20]
    assert mean.tolist() == [4.0, 2.0, 1.0]
    assert lo.tolist() == [3.0, 2.0, 1.0] and hi.tolist() == [5.0, 2.0, 1.0]
    assert stats.mean([3.0, 5.0]) == 4.0


def test_length_metrics_group_test_length_splits_by_metric():
    metrics = (
        "test/seq_accuracy",
        "test_len40/seq_accuracy",
        "test_len10/seq_accuracy",
        "test_len10/token_accuracy",
        "test_len20/seq_accuracy",
    )
    assert plots.length_metrics(metrics) == {  # one length only: no curve for token_accuracy
        "seq_accuracy": {
            10: "test_len10/seq_accuracy",
            20: "test_len20/seq_accuracy",
            40: "test_len40/seq_accuracy",
        }
    }


def test_report_plots_accuracy_against_test_length_per_variant(tmp_path):
    lengths = (10, 20, 40)
    sweep = Sweep(
        config="configs/length_generalization.py",
        variants={"sinusoidal": {}, "alibi": {"model.positional.kind": "alibi"}},
        seeds=(0, 1),
        metrics=tuple(f"test_len{n}/seq_accuracy" for n in lengths),
        baseline="sinusoidal",
    )
    workdir = str(tmp_path / "sweep")
    write_sweep_json(workdir, sweep)
    for variant, decay in (("sinusoidal", 0.5), ("alibi", 0.9)):
        for seed in sweep.seeds:
            metrics = {f"test_len{n}": {"seq_accuracy": decay ** (n / 10)} for n in lengths}
            write_run(workdir, variant, seed, "finished", metrics)
    report = _read(write_report(workdir))
    assert "![seq_accuracy against test length](length_seq_accuracy.png)" in report
    assert os.path.getsize(os.path.join(workdir, "length_seq_accuracy.png")) > 1000
    # No variant with values at two lengths: no figure.
    rows = []
    assert not plots.plot_length_curve(rows, "seq_accuracy", {10: "x"}, str(tmp_path / "p.png"))


def _report_files(workdir):
    return {name: _read(workdir, name) for name in ("report.md", "results.csv", "runs.csv")}


def test_a_runs_csv_with_only_its_header_is_refused_and_nothing_is_overwritten(sweep_dir):
    """Read as "every run missing", it would replace the report with an empty one."""
    write_report(sweep_dir)
    before = _report_files(sweep_dir)
    header_only = os.path.join(sweep_dir, "header_only.csv")
    with open(header_only, "w") as f:
        f.write(before["runs.csv"].splitlines()[0] + "\n")
    with pytest.raises(ValueError, match=f"{header_only} lists no runs"):
        write_report(sweep_dir, runs_csv=header_only)
    assert _report_files(sweep_dir) == before


@pytest.mark.parametrize(
    ("column", "value"), [("seed", "one"), ("step", "10.5"), ("test/seq_accuracy", "high")]
)
def test_a_bad_number_in_a_runs_csv_names_file_line_and_field(sweep_dir, column, value):
    write_report(sweep_dir)
    path = os.path.join(sweep_dir, "edited.csv")
    with open(os.path.join(sweep_dir, "runs.csv")) as f:
        rows = list(csv.reader(f))
    rows[3][rows[0].index(column)] = value  # line 4 of the file
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(ValueError, match=f"^{path}:4: {column}={value!r} is not an? "):
        write_report(sweep_dir, runs_csv=path)
