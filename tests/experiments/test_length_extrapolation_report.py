"""experiments/reports/length_extrapolation.py: each encoding's loss past L against inside it.

The committed folder's tables recompute from its runs.jsonl alone, and the band changes agree
with the sweep report's own per-band means (results.csv), so the two cannot disagree."""

import csv
import json
import shutil
from pathlib import Path

import pytest

from experiments.reports import length_extrapolation as report

FOLDER = Path(__file__).resolve().parents[2] / "results" / "charlm_length_extrapolation"


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    copy = tmp_path_factory.mktemp("lengths")
    for name in ("runs.jsonl", "sweep.json"):
        shutil.copy(FOLDER / name, copy / name)
    report.main([f"--folder={copy}"])
    return copy


def test_the_committed_tables_recompute_from_the_record(rebuilt):
    for name in ("extrapolation.md", "extrapolation.csv"):
        assert (rebuilt / name).read_text() == (FOLDER / name).read_text(), name
    assert (rebuilt / "loss_by_position.png").stat().st_size > 10_000


def test_band_changes_equal_the_reports_band_means(rebuilt):
    with open(FOLDER / "results.csv", newline="") as f:
        means = {r["variant"]: r for r in csv.DictReader(f)}
    with open(rebuilt / "extrapolation.csv", newline="") as f:
        for row in csv.DictReader(f):
            past = float(means[row["encoding"]][f"test/loss_band_{row['band']}:mean"])
            inside = float(means[row["encoding"]]["test/loss_band_1x:mean"])
            # Every seed finished, so the paired mean is the difference of the means.
            assert float(row["diff"]) == pytest.approx(past - inside, abs=1e-9)


def _entry(variant, seed, band_1x, band_kx):
    line = {"step": 1000, "split": "test", "loss_pos_001_016": band_1x}
    line.update({"loss_band_1x": band_1x, **{f"loss_band_{k}x": band_kx for k in (2, 4, 8)}})
    return {
        "variant": variant,
        "seed": seed,
        "status": "finished",
        "files": {"metrics.jsonl": json.dumps(line) + "\n"},
    }


def test_verdicts_flat_rises_and_inconclusive():
    def rows(offsets):
        runs = {
            "v": {
                s: report.final_test_line(_entry("v", s, 2.0, 2.0 + o))
                for s, o in enumerate(offsets)
            }
        }
        return {r["band"]: r["verdict"] for r in report.comparisons(runs)}

    assert set(rows([0.001, -0.001, 0.002, 0.0, -0.002]).values()) == {"flat"}
    assert set(rows([0.5, 0.52, 0.49, 0.51, 0.5]).values()) == {"rises"}
    assert set(rows([0.1, -0.1, 0.08, -0.09, 0.01]).values()) == {"inconclusive"}


def test_a_run_without_the_evaluator_is_named():
    entry = {
        "variant": "v",
        "seed": 3,
        "status": "finished",
        "files": {"metrics.jsonl": json.dumps({"split": "test", "loss": 1.0}) + "\n"},
    }
    with pytest.raises(ValueError, match="v seed 3: no test line with loss_band_1x"):
        report.final_test_line(entry)
