"""Statistics against hand-computed values and published t tables."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

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


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_difference_that_is_not_finite_is_not_tested(bad):
    """A diverged run's NaN test loss: no interval and no p-value (shown as not computed),
    not p = 1 (min(1, NaN) is 1), and so no place in its Holm family."""
    from transformer_jax.report.tables import format_p

    assert math.isnan(stats.t_test_p([bad, 0.1, 0.3]))
    d = stats.paired_difference({0: bad, 1: 0.2, 2: 0.5}, {0: 0.1, 1: 0.1, 2: 0.1})
    assert math.isnan(d.low) and math.isnan(d.high) and math.isnan(d.p_value)
    assert not d.excludes_zero and format_p(d.p_value) == "–"
    adjusted = stats.holm([d.p_value, 0.01, 0.04])
    assert math.isnan(adjusted[0]) and adjusted[1:] == pytest.approx([0.02, 0.04])
    assert stats.family_size([d.p_value, 0.01, 0.04]) == 2


def test_paired_t_test_p_value_hand_computed():
    # Differences 0.05, 0.04, 0.06: t = 0.05 / (0.01 / sqrt(3)) = 8.660; with 2 degrees of
    # freedom the two-sided p is 1 - t / sqrt(2 + t^2) (closed form of the t CDF for df=2).
    d = stats.paired_difference({0: 0.85, 1: 0.86, 2: 0.90}, {0: 0.80, 1: 0.82, 2: 0.84})
    t = 0.05 / (0.01 / math.sqrt(3))
    assert d.p_value == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    assert d.p_value == pytest.approx(0.013072, abs=1e-6)
    # The interval excludes 0 exactly when p < 1 - confidence.
    assert d.excludes_zero and d.p_value < 0.05
    assert math.isnan(stats.paired_difference({0: 1.0}, {0: 0.5}).p_value)  # one seed: no test
    # No spread: no variance estimate, so no test (and no star), whatever the mean.
    assert math.isnan(stats.t_test_p([0.2, 0.2, 0.2]))
    assert math.isnan(stats.t_test_p([0.0, 0.0]))
    same = stats.paired_difference({0: 1.2, 1: 1.3}, {0: 1.0, 1: 1.1})
    assert same.mean == pytest.approx(0.2) and math.isnan(same.low) and not same.excludes_zero


def test_paired_contrast_interaction_hand_computed():
    # A 2x2 design, per seed: y00 (reference), y10 (A changed), y01 (B changed), y11 (both).
    y00 = {0: 0.90, 1: 0.92, 2: 0.94}
    y10 = {0: 0.80, 1: 0.83, 2: 0.83}  # A costs 0.10, 0.09, 0.11 at B=0
    y01 = {0: 0.95, 1: 0.96, 2: 0.97}
    y11 = {0: 0.55, 1: 0.60, 2: 0.56, 3: 0.1}  # A costs 0.40, 0.36, 0.41 at B=1; seed 3 unpaired
    d = stats.paired_contrast([(1, y11), (-1, y01), (-1, y10), (1, y00)])
    # Per-seed interaction (y11 - y01) - (y10 - y00): -0.30, -0.27, -0.30; mean -0.29,
    # sd sqrt(((-0.01)^2 + 0.02^2 + (-0.01)^2) / 2) = sqrt(0.0003), half 4.302653 sd / sqrt(3).
    sd = math.sqrt(0.0003)
    half = 4.302653 * sd / math.sqrt(3)
    assert d.seeds == (0, 1, 2) and d.n == 3
    assert d.mean == pytest.approx(-0.29)
    assert d.low == pytest.approx(-0.29 - half, abs=1e-6)
    assert d.high == pytest.approx(-0.29 + half, abs=1e-6)
    t = 0.29 / (sd / math.sqrt(3))
    assert d.p_value == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)
    # A two-term contrast is the paired difference.
    assert stats.paired_contrast([(1, y10), (-1, y00)]) == stats.paired_difference(y10, y00)


def _holm_step_down(p_values, alpha):
    """The textbook procedure: test the smallest p at alpha / m, the next at alpha / (m - 1),
    ..., and stop at the first that fails (Holm 1979)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def test_holm_adjusted_p_values_known_example():
    p = [0.01, 0.04, 0.03, 0.005]
    # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> running max
    # 0.02, 0.03, 0.06, 0.06.
    assert stats.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert (
        [a <= 0.05 for a in stats.holm(p)]
        == _holm_step_down(p, 0.05)
        == [
            True,
            False,
            False,
            True,
        ]
    )
    # Untested comparisons (NaN) are left out of the family and stay NaN.
    adjusted = stats.holm([0.04, math.nan, 0.01])
    assert math.isnan(adjusted[1]) and adjusted[0] == pytest.approx(0.04)
    assert adjusted[2] == pytest.approx(0.02)
    assert stats.family_size([0.04, math.nan, 0.01]) == 2
    assert stats.holm([0.7, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_holm_agrees_with_the_step_down_procedure_on_random_families():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = list(rng.uniform(0, 0.1, size=rng.integers(1, 9)))
        for alpha in (0.01, 0.05):
            assert [a <= alpha for a in stats.holm(p)] == _holm_step_down(p, alpha)


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(0)
    for _ in range(20):
        p = list(rng.uniform(0, 0.2, 7))
        expected = multipletests(p, method="holm")[1]
        np.testing.assert_allclose(stats.holm(p), expected, rtol=1e-12)


def test_the_t_interval_matches_scipy():
    a, b = {0: 0.85, 1: 0.86, 2: 0.90, 3: 0.80}, {0: 0.80, 1: 0.82, 2: 0.84, 3: 0.81}
    d = stats.paired_difference(a, b)
    ref = scipy_stats.ttest_rel(list(a.values()), list(b.values()))
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    low, high = ref.confidence_interval(0.95)
    assert (d.low, d.high) == (pytest.approx(low, rel=1e-10), pytest.approx(high, rel=1e-10))
