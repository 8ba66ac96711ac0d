"""Equivalence verdicts (report/equivalence.py) against scipy's t distribution, the saturation
flag at a metric's bound, the margins' validation and their place in the report."""

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from run_dir_fixtures import write_run, write_sweep_json
from scipy import stats as scipy_stats

from transformer_jax.report import equivalence, stats
from transformer_jax.report.report import write_report
from transformer_jax.sweep import Factor, Sweep

BASE = {0: 1.00, 1: 1.10, 2: 0.95, 3: 1.05}


def _reference(diffs, margin):
    """The verdict from scipy alone: 95% interval, then the two one-sided tests at 5%."""
    n, d = len(diffs), float(np.mean(diffs))
    se = float(np.std(diffs, ddof=1)) / math.sqrt(n)
    half95 = scipy_stats.t.ppf(0.975, n - 1) * se
    low90, high90 = d - scipy_stats.t.ppf(0.95, n - 1) * se, d + scipy_stats.t.ppf(0.95, n - 1) * se
    p_lower = scipy_stats.t.sf((d + margin) / se, n - 1)  # H0: Δ <= -margin
    p_upper = scipy_stats.t.cdf((d - margin) / se, n - 1)  # H0: Δ >= +margin
    if d - half95 > 0 or d + half95 < 0:
        verdict = equivalence.DIFFERENT
    elif max(p_lower, p_upper) < 0.05:
        verdict = equivalence.EQUIVALENT
    else:
        verdict = equivalence.INCONCLUSIVE
    return (low90, high90), verdict


@pytest.mark.parametrize(
    "offsets, margin, expected",
    [
        ((0.30, 0.32, 0.29, 0.31), 0.05, equivalence.DIFFERENT),
        ((0.004, -0.003, 0.002, -0.001), 0.02, equivalence.EQUIVALENT),
        ((0.05, -0.06, 0.04, -0.02), 0.02, equivalence.INCONCLUSIVE),
        # The same differences with a margin wide enough for their 90% interval.
        ((0.05, -0.06, 0.04, -0.02), 0.2, equivalence.EQUIVALENT),
    ],
)
def test_verdicts_and_intervals_match_scipy(offsets, margin, expected):
    variant = {seed: BASE[seed] + off for seed, off in zip(BASE, offsets, strict=True)}
    diff = stats.paired_difference(variant, BASE)
    (low, high), verdict = _reference([variant[s] - BASE[s] for s in BASE], margin)
    assert equivalence.equivalence_interval(diff) == pytest.approx((low, high), rel=1e-9)
    assert verdict == expected
    assert equivalence.verdict(diff, margin) == expected


def test_one_seed_gets_no_verdict():
    assert equivalence.verdict(stats.paired_difference({0: 1.0}, {0: 0.5}), 0.1) == ""


@pytest.mark.parametrize(
    "metric, means, margin, expected",
    [
        ("test/seq_accuracy", (0.998, 1.0), 0.01, True),
        ("test/seq_accuracy", (0.998, 0.95), 0.01, False),  # one cell below the ceiling
        ("test/seq_accuracy", (0.9901, 0.995), 0.01, True),  # just inside the margin
        ("validation/loss", (0.004, 0.011), 0.02, True),
        ("validation/mean_loss", (0.5, 0.49), 0.02, False),
        ("test/bleu", (100.0, 100.0), 0.5, False),  # no known bound
    ],
)
def test_saturation_is_every_mean_within_the_margin_of_the_bound(metric, means, margin, expected):
    assert equivalence.saturated(metric, means, margin) is expected


def _sweep(**changes) -> Sweep:
    kwargs = dict(
        config="configs/fake.py",
        variants={"base": {}, "same": {"model.x": 1}, "worse": {"model.x": 2}},
        seeds=(0, 1, 2, 3),
        metrics=("test/loss", "test/seq_accuracy"),
        baseline="base",
        equivalence_margins={"test/loss": 0.02, "test/seq_accuracy": 0.01},
    )
    return Sweep(**{**kwargs, **changes})


@pytest.mark.parametrize(
    "margins, message",
    [
        ({"validation/loss": 0.1}, r"equivalence_margins\['validation/loss'\]: not a reported"),
        ({"test/loss": 0.0}, r"= 0.0: must be a number > 0"),
        ({"test/loss": -1}, r"= -1: must be a number > 0"),
        ({"test/loss": True}, r"= True: must be a number > 0"),
        ({"test/loss": math.inf}, r"= inf: must be a number > 0"),
    ],
)
def test_margins_are_checked_in_one_line(margins, message):
    with pytest.raises(ValueError, match=message) as error:
        _sweep(equivalence_margins=margins)
    assert "\n" not in str(error.value)


def test_margins_survive_sweep_json():
    sweep = _sweep()
    assert Sweep.from_dict(sweep.to_dict()).equivalence_margins == sweep.equivalence_margins
    assert "equivalence_margins" not in _sweep(equivalence_margins={}).to_dict()


def test_the_report_gives_every_comparison_its_verdict_and_flags_the_ceiling(tmp_path):
    workdir = str(tmp_path / "sweep")
    sweep = _sweep()
    write_sweep_json(workdir, sweep)
    loss = {
        "base": (0.50, 0.52, 0.49, 0.51),
        "same": (0.501, 0.519, 0.491, 0.509),
        "worse": (0.80, 0.83, 0.79, 0.82),
    }
    for variant, losses in loss.items():
        for seed, value in enumerate(losses):
            metrics = {"test": {"loss": value, "seq_accuracy": 0.999 + 0.001 * (seed % 2)}}
            write_run(workdir, variant, seed, "finished", metrics)
    report = Path(write_report(workdir)).read_text()
    assert "### Equivalence" in report
    with open(tmp_path / "sweep" / equivalence.EQUIVALENCE_CSV) as f:
        rows = {(r["metric"], r["comparison"]): r for r in csv.DictReader(f)}
    assert rows[("test/loss", "same − base")]["verdict"] == equivalence.EQUIVALENT
    assert rows[("test/loss", "worse − base")]["verdict"] == equivalence.DIFFERENT
    assert rows[("test/loss", "same − base")]["saturated"] == "False"
    # Every seed at 0.999 or 1.0: equal, and at the ceiling, which the flag says.
    accuracy = rows[("test/seq_accuracy", "same − base")]
    assert accuracy["saturated"] == "True" and float(accuracy["margin"]) == 0.01
    assert report.count(equivalence.SATURATED) >= 2  # the legend and at least one row


def test_a_factorial_sweep_gets_verdicts_for_its_effects_and_interactions(tmp_path):
    workdir = str(tmp_path / "sweep")
    sweep = Sweep(
        config="configs/fake.py",
        factors=(
            Factor("scale", {"sqrt": {}, "none": {"model.x": 1}}),
            Factor("depth", {"d2": {}, "d6": {"model.y": 6}}),
        ),
        seeds=(0, 1, 2),
        metrics=("test/loss",),
        equivalence_margins={"test/loss": 0.05},
    )
    write_sweep_json(workdir, sweep)
    shift = {"sqrt_d2": 0.0, "none_d2": 0.5, "sqrt_d6": 0.001, "none_d6": 0.501}
    for variant, offset in shift.items():
        for seed in sweep.seeds:
            # The per-seed differences must spread: sd 0 gives no test (report/stats.py).
            spread = 0.001 * (seed == 1) * (1 + offset) + 0.0005 * (seed == 2) * (offset + 1) ** 3
            metrics = {"test": {"loss": 1.0 + 0.01 * seed + offset + spread}}
            write_run(workdir, variant, seed, "finished", metrics)
    write_report(workdir)
    with open(tmp_path / "sweep" / equivalence.EQUIVALENCE_CSV) as f:
        rows = {(r["comparison"], r["held_fixed"]): r for r in csv.DictReader(f)}
    assert rows[("scale: none − sqrt", "depth=d2")]["verdict"] == equivalence.DIFFERENT
    interaction = next(r for (label, _), r in rows.items() if "×" in label)
    assert len(interaction["means"].split()) == 4  # the four cells of the 2x2
    assert float(interaction["tost_high"]) < 0.05 and float(interaction["tost_low"]) > -0.05


def test_a_tuned_sweep_judges_each_variant_at_its_chosen_setting(tmp_path):
    """b is as good as a at the rate validation chooses for it, and far worse at the shared
    default: the verdict is the tuned one."""
    workdir = str(tmp_path / "sweep")
    sweep = _sweep(
        variants={"a": {}, "b": {"model.x": 1}},
        baseline="a",
        seeds=(0, 1, 2),
        metrics=("test/loss",),
        equivalence_margins={"test/loss": 0.02},
        nuisance={"train.learning_rate": (1e-3, 1e-2)},
        select_on="validation/loss",
        select_mode="min",
        nuisance_default={"train.learning_rate": 1e-3},
    )
    write_sweep_json(workdir, sweep)
    for run_variant in sweep.run_variants:
        variant, setting = run_variant.split("/")
        good = variant == "a" or "0.01" in setting  # b needs the larger rate
        for seed in sweep.seeds:
            # b's seeds differ from a's a little (sd 0 would give no test).
            jitter = 0.001 * (seed == 1) + 0.002 * (seed == 2) * (variant == "b")
            loss = 1.0 + 0.01 * seed + (jitter if good else 0.5)
            metrics = {"validation": {"loss": loss}, "test": {"loss": loss}}
            write_run(workdir, run_variant, seed, "finished", metrics)
    write_report(workdir)
    with open(tmp_path / "sweep" / equivalence.EQUIVALENCE_CSV) as f:
        (row,) = list(csv.DictReader(f))
    assert row["comparison"] == "b − a" and row["verdict"] == equivalence.EQUIVALENT
