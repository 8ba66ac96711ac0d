"""Statistics for sweep tables: mean, sample standard deviation, paired t confidence intervals.

Seeds are few (3-5), so intervals use Student's t distribution rather than the normal one; the
difference between two variants is paired by seed (same data order and initialisation draw), which
removes the seed-to-seed variance both variants share. The t distribution is scipy.stats'.

Seeds that agree exactly (sample sd 0 of the per-seed differences, e.g. a step count every seed
reaches at the same evaluation) give no variance estimate: no interval, no p-value and so no
star, whatever the mean.
"""

import dataclasses
import math
from collections.abc import Mapping, Sequence

from scipy import stats as scipy_stats


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN for no values."""
    return math.fsum(values) / len(values) if values else math.nan


def sample_std(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); NaN for fewer than two values."""
    if len(values) < 2:
        return math.nan
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with df degrees of freedom (scipy.stats.t)."""
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    return float(scipy_stats.t.cdf(t, df))


def t_quantile(p: float, df: float) -> float:
    """Inverse CDF of Student's t: the t with P(T <= t) = p, e.g. t_quantile(0.975, 2) = 4.303."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    return float(scipy_stats.t.ppf(p, df))


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """Mean of per-seed differences (variant - baseline, or any contrast) with its confidence
    interval and the two-sided p-value of the paired t-test of mean 0.

    low/high/p_value are NaN when fewer than two seeds are paired, a per-seed difference is not
    finite, or the differences have no spread (no variance estimate): not computed.
    """

    mean: float
    low: float
    high: float
    n: int
    seeds: tuple[int, ...]
    p_value: float = math.nan

    @property
    def excludes_zero(self) -> bool:
        """True when the whole interval lies on one side of zero (a significant difference)."""
        return self.n >= 2 and not math.isnan(self.low) and (self.low > 0.0 or self.high < 0.0)


def no_spread(values: Sequence[float]) -> bool:
    """True when the values agree up to float rounding (their mean of equal values is not
    always exact, so neither is a zero sd)."""
    return sample_std(values) <= 1e-12 * max(1.0, abs(mean(values)))


def t_test_p(diffs: Sequence[float]) -> float:
    """Two-sided p-value of the one-sample t-test of mean(diffs) = 0 (n - 1 degrees of freedom).

    NaN for fewer than two values, no spread (sd 0: no variance estimate, no test) or a value
    that is not finite (a diverged run's NaN loss: min(1, NaN) would read as p = 1).
    """
    n = len(diffs)
    if n < 2 or not all(math.isfinite(d) for d in diffs):
        return math.nan
    d, sd = mean(diffs), sample_std(diffs)
    if no_spread(diffs):
        return math.nan
    t = abs(d) / (sd / math.sqrt(n))
    return min(1.0, 2.0 * (1.0 - t_cdf(t, n - 1)))


def paired_contrast(
    terms: Sequence[tuple[float, Mapping[int, float]]], confidence: float = 0.95
) -> PairedDifference:
    """A contrast sum_i c_i * value_i computed per seed, then its mean and t interval.

    Args:
      terms: (coefficient, seed -> metric value) pairs; only seeds present in every term are
        used. [(1, b), (-1, a)] is the paired difference b - a; [(1, ab), (-1, a0b), (-1, ab0),
        (1, a0b0)] the interaction (difference of differences) of a 2x2 design.
      confidence: two-sided coverage of the interval.

    Returns:
      mean d of the per-seed contrasts, d +- t_{(1+confidence)/2, n-1} * std / sqrt(n), and the
      two-sided paired t-test p-value, which is below 1 - confidence exactly when the interval
      excludes 0.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not terms:
        raise ValueError("a contrast needs at least one term")
    common = set(terms[0][1])
    for _, values in terms[1:]:
        common &= set(values)
    seeds = tuple(sorted(common))
    diffs = [math.fsum(c * values[s] for c, values in terms) for s in seeds]
    n = len(diffs)
    d = mean(diffs)
    if n < 2 or not all(math.isfinite(x) for x in diffs) or no_spread(diffs):
        return PairedDifference(d, math.nan, math.nan, n, seeds)
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sample_std(diffs) / math.sqrt(n)
    return PairedDifference(d, d - half, d + half, n, seeds, t_test_p(diffs))


def paired_difference(
    variant: Mapping[int, float], baseline: Mapping[int, float], confidence: float = 0.95
) -> PairedDifference:
    """Paired-by-seed difference of a variant from the baseline.

    Args:
      variant, baseline: seed -> metric value; only seeds present in both are paired.
      confidence: two-sided coverage of the interval.

    Returns:
      mean d = mean_s (variant[s] - baseline[s]) and the t interval
      d +- t_{(1+confidence)/2, n-1} * std(d) / sqrt(n), with the paired t-test p-value.
    """
    return paired_contrast([(1.0, variant), (-1.0, baseline)], confidence)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979) of one family of comparisons.

    Sorted ascending, p_(i) is adjusted to max_{j <= i} min(1, (m - j + 1) p_(j)) with m the
    number of comparisons; a comparison survives at family-wise error rate alpha when its
    adjusted p-value is <= alpha, which is the step-down procedure (reject p_(1) if p_(1) <=
    alpha / m, then p_(2) if p_(2) <= alpha / (m - 1), ..., stopping at the first that fails).
    NaN p-values (comparisons without a test) are not part of the family and stay NaN.
    """
    order = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(order)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def family_size(p_values: Sequence[float]) -> int:
    """Number of comparisons in a Holm family: those with a p-value."""
    return sum(not math.isnan(p) for p in p_values)
