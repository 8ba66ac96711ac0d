"""Statistics for sweep tables: mean, sample standard deviation, paired t confidence intervals.

Seeds are few (3-5), so intervals use Student's t distribution rather than the normal one; the
difference between two variants is paired by seed (same data order and initialisation draw), which
removes the seed-to-seed variance both variants share. scipy is not a dependency, so the t
quantile is computed here from the regularised incomplete beta function (Numerical Recipes, 3rd ed.,
sections 6.4 and 6.14).
"""

import dataclasses
import math
from collections.abc import Mapping, Sequence


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN for no values."""
    return math.fsum(values) / len(values) if values else math.nan


def sample_std(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); NaN for fewer than two values."""
    if len(values) < 2:
        return math.nan
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b) for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    # The continued fraction converges fast only for x below the mean; use the symmetry
    # I_x(a, b) = 1 - I_{1-x}(b, a) above it.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Inverse CDF of Student's t: the t with P(T <= t) = p, e.g. t_quantile(0.975, 2) = 4.303."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    # Bisection: the CDF is monotone, and 200 halvings reach float resolution from any bracket.
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """Mean of per-seed differences (variant - baseline, or any contrast) with its confidence
    interval and the two-sided p-value of the paired t-test of mean 0.

    low/high/p_value are NaN when fewer than two seeds are paired (no variance estimate).
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
        return self.n >= 2 and (self.low > 0.0 or self.high < 0.0)


def t_test_p(diffs: Sequence[float]) -> float:
    """Two-sided p-value of the one-sample t-test of mean(diffs) = 0 (n - 1 degrees of freedom).

    NaN for fewer than two values; with no spread, 0 when the mean is not 0 and 1 when it is.
    """
    n = len(diffs)
    if n < 2:
        return math.nan
    d, sd = mean(diffs), sample_std(diffs)
    if sd == 0.0:
        return 1.0 if d == 0.0 else 0.0
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
    if n < 2:
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
