"""experiments/reports/claims.py: the README's claims as one Holm family, with verdicts.

The committed results are read as they are: each recomputed Δ must equal the one its own sweep
report wrote (effects.csv), so the family cannot quote a different number than the tables.
"""

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments.reports import claims
from transformer_jax.report import stats
from transformer_jax.sweep_dir import RUNS_CSV_LEADING, RUNS_CSV_TRAILING

RESULTS = Path(__file__).resolve().parents[2] / "results"


@pytest.fixture(scope="module")
def committed():
    return claims.evaluate(RESULTS)


def _reported(sweep: str) -> dict[tuple[str, str], dict[str, str]]:
    """(metric, "+1*variant -1*baseline") -> the report's diff, ci_low and p for that Δ."""
    if (RESULTS / sweep / "effects.csv").exists():  # factorial sweeps
        with open(RESULTS / sweep / "effects.csv", newline="") as f:
            rows = csv.DictReader(f)
            return {(r["metric"], r["terms"]): r for r in rows if r["kind"] == "simple"}
    with open(RESULTS / sweep / "results.csv", newline="") as f:  # against one baseline
        rows = list(csv.DictReader(f))
    baseline = next(r["variant"] for r in rows if r["is_baseline"] == "True")
    out = {}
    for r in rows:
        for metric in {k.rpartition(":")[0] for k in r if k.endswith(":diff") and r[k]}:
            fields = {f: r[f"{metric}:{f}"] for f in ("diff", "ci_low", "p")}
            out[(metric, f"+1*{r['variant']} -1*{baseline}")] = fields
    return out


def test_every_claim_equals_its_sweep_reports_own_figure(committed):
    checked = 0
    for v in committed:
        c = v.claim
        row = _reported(c.sweep).get((c.metric, f"+1*{c.variant} -1*{c.baseline}"))
        if row is None or c.warmup:
            continue
        assert v.ci95.mean == pytest.approx(float(row["diff"]), abs=1e-12)
        assert v.ci95.low == pytest.approx(float(row["ci_low"]), abs=1e-12)
        assert v.ci95.p_value == pytest.approx(float(row["p"]), rel=1e-9)
        checked += 1
    assert checked >= 25


def test_the_family_is_holm_over_every_claim(committed):
    p = [v.ci95.p_value for v in committed]
    assert [v.p_family for v in committed] == stats.holm(p)
    assert all(v.p_family >= v.ci95.p_value for v in committed)
    # Over the whole family fewer differences survive than each table's own correction kept.
    assert sum(v.p_family <= 0.05 for v in committed) < sum(v.ci95.excludes_zero for v in committed)


def _write_runs(path: Path, metric: str, cells: dict[str, list[float]]) -> None:
    path.mkdir(parents=True)
    with open(path / "runs.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*RUNS_CSV_LEADING, metric, *RUNS_CSV_TRAILING])
        for variant, values in cells.items():
            for seed, value in enumerate(values):
                writer.writerow([variant, seed, "finished", 100, value, 1, 1.0, 1.0, "c", ""])


def _verdict(tmp_path, metric, a, b):
    _write_runs(tmp_path / "s", metric, {"a": a, "b": b})
    claim = claims.Claim("row", "s", metric, "a", "b", "a − b")
    (v,) = claims.evaluate(tmp_path, [claim])
    return v


def _tost_equivalent(diffs, margin):
    """Two one-sided t-tests at 5% by scipy: equivalent when both reject."""
    low = scipy_stats.ttest_1samp(diffs, -margin, alternative="greater").pvalue
    high = scipy_stats.ttest_1samp(diffs, margin, alternative="less").pvalue
    return max(low, high) < 0.05


@pytest.mark.parametrize(
    ("a", "b", "word"),
    [
        ([0.50, 0.52, 0.51, 0.50], [0.60, 0.61, 0.63, 0.60], "different"),
        ([0.600, 0.612, 0.605, 0.598], [0.602, 0.608, 0.607, 0.601], "equivalent"),
        ([0.50, 0.62, 0.55, 0.58], [0.55, 0.54, 0.60, 0.52], "inconclusive"),
    ],
)
def test_verdict_words_agree_with_scipy(tmp_path, a, b, word):
    v = _verdict(tmp_path, claims.SEQ, a, b)
    diffs = np.subtract(a, b)
    p = scipy_stats.ttest_1samp(diffs, 0.0).pvalue
    assert v.ci95.p_value == pytest.approx(p, rel=1e-6)
    assert v.word == word
    assert (v.word == "equivalent") == (not p < 0.05 and _tost_equivalent(diffs, v.margin))


def test_saturated_only_when_both_cells_sit_at_the_bound(tmp_path):
    at_ceiling = _verdict(tmp_path, claims.SEQ, [0.998, 1.0, 0.996], [1.0, 0.999, 0.997])
    assert at_ceiling.saturated and at_ceiling.word == "equivalent"
    one_below = _verdict(tmp_path / "x", claims.SEQ, [0.998, 1.0, 0.996], [0.95, 0.96, 0.97])
    assert not one_below.saturated
    loss_floor = _verdict(tmp_path / "y", claims.LOSS, [0.003, 0.004, 0.002], [0.01, 0.012, 0.011])
    assert loss_floor.saturated and loss_floor.word == "different"


def test_missing_cells_name_the_sweep_and_cells(tmp_path):
    _write_runs(tmp_path / "s", claims.SEQ, {"a": [0.5, 0.6]})
    with pytest.raises(ValueError, match="s: a or b has no test/seq_accuracy"):
        claims.evaluate(tmp_path, [claims.Claim("row", "s", claims.SEQ, "a", "b", "a − b")])
    assert math.isnan(stats.holm([math.nan])[0])


def test_a_warmup_claim_chooses_among_the_selection_runs_only(tmp_path):
    """Confirmation runs ("<cell>/confirm/<setting>", fresh seeds) never take part in the
    choice of each warmup's best setting, even with a lower validation loss."""
    path = tmp_path / "s"
    path.mkdir()
    metrics = ["validation/loss", claims.LOSS]
    cells = {  # variant -> (seeds, validation loss, test loss)
        "c/learning_rate-0.01_warmup_steps-0": ((0, 1, 2), 2.0, [2.0, 2.1, 2.2]),
        "c/learning_rate-0.01_warmup_steps-100": ((0, 1, 2), 1.9, [1.9, 1.9, 2.0]),
        "c/learning_rate-0.02_warmup_steps-100": ((0, 1, 2), 1.95, [1.0, 1.0, 1.0]),
        "c/confirm/learning_rate-0.01_warmup_steps-100": ((10, 11, 12), 1.5, [1.5, 1.6, 1.7]),
    }
    with open(path / "runs.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*RUNS_CSV_LEADING, *metrics, *RUNS_CSV_TRAILING])
        for variant, (seeds, validation, tests) in cells.items():
            for seed, test in zip(seeds, tests, strict=True):
                writer.writerow(
                    [variant, seed, "finished", 100, validation, test, 1, 1.0, 1.0, "c", ""]
                )
    claim = claims.Claim("row", "s", claims.LOSS, "c", "c", "without − with", warmup=100)
    (v,) = claims.evaluate(tmp_path, [claim])
    assert v.variant_mean == pytest.approx(2.1) and v.baseline_mean == pytest.approx(1.9 + 0.1 / 3)
    assert v.ci95.n == 3
