"""Statistics against hand-computed values and published t tables."""

import math

import numpy as np
import pytest

from transformer_jax.report import stats


@pytest.mark.parametrize(
    "p, df, expected",
    [
        # Two-sided 95% and 99% critical values from standard t tables.
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 3, 3.182),
        (0.975, 4, 2.776),
        (0.975, 9, 2.262),
        (0.975, 30, 2.042),
        (0.995, 2, 9.925),
        (0.995, 10, 3.169),
        (0.95, 5, 2.015),
    ],
)
def test_t_quantile_matches_tables(p, df, expected):
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=5e-4)


def test_t_quantile_closed_forms():
    # df=1 is the Cauchy distribution: quantile tan(pi (p - 1/2)); df=2 has
    # t = (2p - 1) sqrt(2 / (4 p (1 - p))).
    for p in (0.6, 0.9, 0.975, 0.999):
        assert stats.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
        closed = (2 * p - 1) * math.sqrt(2 / (4 * p * (1 - p)))
        assert stats.t_quantile(p, 2) == pytest.approx(closed, rel=1e-9)


def test_t_quantile_symmetry_and_normal_limit():
    assert stats.t_quantile(0.5, 3) == pytest.approx(0.0, abs=1e-9)
    assert stats.t_quantile(0.025, 4) == pytest.approx(-stats.t_quantile(0.975, 4), rel=1e-12)
    assert stats.t_quantile(0.975, 1e6) == pytest.approx(1.959964, abs=1e-5)
    assert stats.t_cdf(stats.t_quantile(0.9, 7), 7) == pytest.approx(0.9, abs=1e-12)


def test_t_quantile_rejects_bad_input():
    with pytest.raises(ValueError, match="p must be in"):
        stats.t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="df must be positive"):
        stats.t_quantile(0.9, 0)


def test_mean_and_sample_std():
    values = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert stats.mean(values) == 5.0
    # Sum of squared deviations = 32; ddof=1 -> 32 / 7.
    assert stats.sample_std(values) == pytest.approx(math.sqrt(32 / 7))
    assert stats.sample_std(values) == pytest.approx(np.std(values, ddof=1))
    assert math.isnan(stats.sample_std([1.0]))
    assert math.isnan(stats.mean([]))


def test_paired_difference_hand_computed():
    baseline = {0: 0.80, 1: 0.82, 2: 0.84}
    variant = {0: 0.85, 1: 0.86, 2: 0.90}
    d = stats.paired_difference(variant, baseline)
    # Differences 0.05, 0.04, 0.06: mean 0.05, sd 0.01, half-width 4.303 * 0.01 / sqrt(3).
    half = 4.302653 * 0.01 / math.sqrt(3)
    assert d.n == 3 and d.seeds == (0, 1, 2)
    assert d.mean == pytest.approx(0.05)
    assert d.low == pytest.approx(0.05 - half, abs=1e-6)
    assert d.high == pytest.approx(0.05 + half, abs=1e-6)
    assert d.excludes_zero


def test_paired_difference_uses_only_common_seeds_and_pairing_matters():
    # A shared per-seed offset cancels in paired differences: the interval is tight even though
    # the unpaired spread is large.
    baseline = {0: 0.1, 1: 0.5, 2: 0.9, 7: 123.0}
    variant = {0: 0.11, 1: 0.52, 2: 0.90, 5: -99.0}
    d = stats.paired_difference(variant, baseline)
    assert d.seeds == (0, 1, 2)
    assert d.mean == pytest.approx(0.01)
    diffs = [0.01, 0.02, 0.0]
    half = stats.t_quantile(0.975, 2) * np.std(diffs, ddof=1) / math.sqrt(3)
    assert (d.low, d.high) == pytest.approx((0.01 - half, 0.01 + half))
    assert not d.excludes_zero


def test_paired_difference_single_pair_has_no_interval():
    d = stats.paired_difference({0: 1.0}, {0: 0.5, 1: 0.7})
    assert d.n == 1 and d.mean == 0.5
    assert math.isnan(d.low) and math.isnan(d.high) and not d.excludes_zero
    none = stats.paired_difference({1: 1.0}, {0: 0.5})
    assert none.n == 0 and math.isnan(none.mean)
