"""Seeds until decided: confirmation in rounds, each comparison judged at alpha-spending bounds.

A sweep with `confirm_rounds` (e.g. (4, 8, 12, 16, 20), cumulative counts of confirm_seeds)
trains each cell's chosen setting on the first round's confirmation seeds, judges every declared
comparison (`comparisons`: a flat sweep's variants against the baseline, a factorial sweep's
simple effects) on every metric with an equivalence margin, and trains the next round only for
the cells with a comparison still undecided. A comparison stops at the first look where it is

- *different*: the paired t statistic |mean| / se reaches the look's two-sided boundary;
- *equivalent*: both one-sided tests of TOST (Schuirmann 1987), (mean + margin) / se and
  (margin - mean) / se, reach the look's one-sided boundary, i.e. the look's repeated
  1 - 2 alpha interval lies inside (-margin, +margin);

and is *undecided at n = max* when no look decides it.

Boundaries: the Lan-DeMets alpha-spending approach (Lan & DeMets 1983, "Discrete sequential
boundaries for clinical trials", Biometrika 70(3):659-663), with the O'Brien-Fleming-type
spending function alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) (their eq. for alpha_1*(t)) or
the Pocock-type alpha(t) = alpha log(1 + (e - 1) t), at the information fractions t_k = n_k / n_K
of the declared rounds. The two-sided test spends alpha over both tails; each one-sided test of
TOST spends its own alpha (Jennison & Turnbull 2000, "Group Sequential Methods with
Applications to Clinical Trials", ch. 6.3 for equivalence tests as two one-sided tests). The
boundaries are solved look by look by the recursive numerical integration of the score's
density (Jennison & Turnbull 2000, ch. 19.2: Armitage, McPherson & Rowe 1969).

Small n: the paired deltas' variance is estimated, so the statistic is Student's t, not normal.
Each look's nominal z boundary c_k is used at its nominal significance level: the t boundary is
the t_{n-1} quantile with the same tail probability, t_{n-1}^{-1}(Phi(c_k)) (Jennison & Turnbull
2000, ch. 11.4, "the significance level approach"); `simulate` checks that the error rates hold
(tests/sweep/test_sequential.py). The "adjusted interval" is the repeated confidence interval of
the look that decided (or the last): mean +- t_k se (Jennison & Turnbull 2000, ch. 9).

A look with no spread among the deltas (sd 0) gives no test and decides nothing.
"""

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import optimize, stats

from transformer_jax.sweep.nuisance import confirm_run_variant

ALPHA = 0.05
OBRIEN_FLEMING, POCOCK = "obrien_fleming", "pocock"
SPENDING = (OBRIEN_FLEMING, POCOCK)
DIFFERENT, EQUIVALENT, UNDECIDED = "different", "equivalent", "undecided"
_GRID = 1601  # points of the score's density per look: boundaries to ~1e-4


def spent(t: np.ndarray, alpha: float, spending: str) -> np.ndarray:
    """The error spent by information fraction t (0 < t <= 1): alpha at t = 1."""
    t = np.asarray(t, dtype=float)
    if spending == OBRIEN_FLEMING:
        return 2.0 - 2.0 * stats.norm.cdf(stats.norm.ppf(1.0 - alpha / 2.0) / np.sqrt(t))
    if spending == POCOCK:
        return alpha * np.log1p((math.e - 1.0) * t)
    raise ValueError(f"spending = {spending!r}: must be one of {list(SPENDING)}")


def _weights(n: int, h: float) -> np.ndarray:
    """Simpson's rule weights for n (odd) equally spaced points h apart."""
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w * h / 3.0


def z_boundaries(
    fractions: Sequence[float], alpha: float = ALPHA, spending: str = OBRIEN_FLEMING, sides=2
) -> np.ndarray:
    """Nominal z boundaries c_1..c_K of a group-sequential test at information fractions
    (increasing, the last 1): sides=2 rejects at |Z_k| >= c_k, each tail's probability under
    the null of crossing first at look k being alpha'(t_k) - alpha'(t_{k-1}) with alpha' the
    spending function of alpha / 2; sides=1 rejects at Z_k >= c_k, spending alpha.

    The score S_k = Z_k sqrt(t_k) is Brownian motion in t; its density on the continuation
    region is carried from look to look by convolution with the increment's normal density
    (Simpson's rule on a grid), and each boundary solved so that the exit probability is the
    increment of the spending function."""
    t = np.asarray(fractions, dtype=float)
    if t.ndim != 1 or not len(t) or np.any(np.diff(t) <= 0) or t[0] <= 0 or abs(t[-1] - 1) > 1e-12:
        raise ValueError(f"fractions = {list(fractions)}: must increase from > 0 to 1")
    # Two-sided: each tail spends alpha / 2 by the spending function (Lan & DeMets 1983's
    # symmetric boundaries), so the tails together spend alpha.
    increments = sides * np.diff(spent(t, alpha / sides, spending), prepend=0.0)
    bounds = np.empty(len(t))
    grid = weights = density = None
    for k, (tk, target) in enumerate(zip(t, increments, strict=True)):
        if k == 0:
            bounds[0] = stats.norm.isf(target / sides)

            def exit_prob(c):
                return sides * stats.norm.sf(c)
        else:
            step = math.sqrt(tk - t[k - 1])
            mass = weights * density

            def exit_prob(c, mass=mass, step=step, grid=grid, tk=tk):
                upper = stats.norm.sf((c * math.sqrt(tk) - grid) / step)
                lower = stats.norm.cdf((-c * math.sqrt(tk) - grid) / step) if sides == 2 else 0
                return float(np.sum(mass * (upper + lower)))

            if target <= 0:
                bounds[k] = math.inf
            else:
                bounds[k] = optimize.brentq(
                    lambda c, target=target: exit_prob(c) - target, 0.0, 40.0, xtol=1e-10
                )
        # The density of S_k where the test goes on: |S_k| < c sqrt(t_k) (one-sided: below).
        c = min(bounds[k], 12.0) * math.sqrt(tk)
        low = -c if sides == 2 else -12.0 * math.sqrt(tk)
        new_grid = np.linspace(low, c, _GRID)
        new_weights = _weights(_GRID, new_grid[1] - new_grid[0])
        if k == 0:
            new_density = stats.norm.pdf(new_grid / math.sqrt(tk)) / math.sqrt(tk)
        else:
            step = math.sqrt(tk - t[k - 1])
            kernel = stats.norm.pdf((new_grid[:, None] - grid[None, :]) / step) / step
            new_density = kernel @ (weights * density)
        grid, weights, density = new_grid, new_weights, new_density
    return bounds


def t_boundary(z: np.ndarray, df: np.ndarray) -> np.ndarray:
    """The t boundary at the same nominal tail probability as z: t_df^{-1}(Phi(z))."""
    return stats.t.isf(stats.norm.sf(z), df)


@dataclasses.dataclass(frozen=True)
class Design:
    """The declared rounds (cumulative seed counts), spending function and alpha; the nominal
    z boundaries of the two-sided test and of each one-sided test of TOST."""

    rounds: tuple[int, ...]
    spending: str = OBRIEN_FLEMING
    alpha: float = ALPHA

    @property
    def fractions(self) -> np.ndarray:
        return np.asarray(self.rounds, dtype=float) / self.rounds[-1]

    @property
    def two_sided(self) -> np.ndarray:
        return _cached(self.rounds, self.spending, self.alpha, 2)

    @property
    def one_sided(self) -> np.ndarray:
        return _cached(self.rounds, self.spending, self.alpha, 1)


_BOUNDS: dict[tuple, np.ndarray] = {}


def _cached(rounds, spending, alpha, sides) -> np.ndarray:
    key = (rounds, spending, alpha, sides)
    if key not in _BOUNDS:
        fractions = np.asarray(rounds, dtype=float) / rounds[-1]
        _BOUNDS[key] = z_boundaries(fractions, alpha, spending, sides)
    return _BOUNDS[key]


def check_rounds(rounds) -> tuple[int, ...]:
    """`Sweep.confirm_rounds` checked: strictly increasing seed counts, the first >= 2."""
    ok = isinstance(rounds, list | tuple) and all(
        isinstance(n, int) and not isinstance(n, bool) for n in rounds
    )
    if (
        not ok
        or not rounds
        or rounds[0] < 2
        or any(b <= a for a, b in zip(rounds, rounds[1:], strict=False))
    ):
        raise ValueError(
            f"confirm_rounds = {rounds!r}: must be strictly increasing cumulative seed counts, "
            "the first at least 2, e.g. (4, 8, 12, 16, 20)"
        )
    return tuple(rounds)


@dataclasses.dataclass(frozen=True)
class Decision:
    """One comparison's sequential verdict: DIFFERENT, EQUIVALENT or UNDECIDED (at n = max when
    `final`), at look `looks` with n paired seeds, the mean delta and the repeated intervals of
    that look (two-sided 1 - alpha and TOST's 1 - 2 alpha; NaN without a test)."""

    verdict: str
    looks: int
    n: int
    mean: float
    low: float
    high: float
    tost_low: float
    tost_high: float
    final: bool = False

    @property
    def text(self) -> str:
        if self.verdict == UNDECIDED:
            return f"undecided at n = {self.n}" + ("" if self.final else " (more rounds to come)")
        return self.verdict


def judge_look(deltas: Sequence[float], look: int, margin: float, design: Design) -> Decision:
    """The verdict of one look (0-based) on its paired deltas (variant - other, one per seed)."""
    d = np.asarray(deltas, dtype=float)
    n = len(d)
    final = look == len(design.rounds) - 1
    nan = math.nan
    if n < 2 or not np.std(d) > 0:
        return Decision(
            UNDECIDED, look + 1, n, float(d.mean()) if n else nan, nan, nan, nan, nan, final
        )
    mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    c = float(t_boundary(design.two_sided[look], n - 1)) * se
    b = float(t_boundary(design.one_sided[look], n - 1)) * se
    verdict = UNDECIDED
    if abs(mean) >= c:
        verdict = DIFFERENT
    elif -margin < mean - b and mean + b < margin:
        verdict = EQUIVALENT
    return Decision(verdict, look + 1, n, mean, mean - c, mean + c, mean - b, mean + b, final)


def judge(looks: Sequence[Sequence[float]], margin: float, design: Design) -> Decision | None:
    """The decision after the looks made so far (deltas of each look, cumulative): the first
    deciding look's, else the last look's UNDECIDED; None before the first look."""
    decision = None
    for k, deltas in enumerate(looks):
        decision = judge_look(deltas, k, margin, design)
        if decision.verdict != UNDECIDED:
            return decision
    return decision


def simulate(
    delta: float,
    sd: float,
    margin: float,
    design: Design,
    sims: int = 4000,
    seed: int = 0,
    bounded: bool = True,
) -> dict[str, np.ndarray | float]:
    """Monte Carlo of the design on normal paired deltas N(delta, sd^2): the rate of each
    verdict and the mean number of seeds used. bounded=False tests every look at the fixed-n
    levels instead (the 1 - alpha t interval and TOST at alpha), which `judge` must beat.
    Vectorised over the sequences; the t boundaries depend on the look only."""
    rng = np.random.default_rng(seed)
    n_max = design.rounds[-1]
    x = rng.normal(delta, sd, size=(sims, n_max))
    csum, csq = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
    decided = np.zeros(sims, dtype=bool)
    verdict = np.full(sims, UNDECIDED, dtype=object)
    used = np.full(sims, n_max)
    for k, n in enumerate(design.rounds):
        mean = csum[:, n - 1] / n
        var = np.maximum(csq[:, n - 1] - n * mean * mean, 0.0) / (n - 1)
        se = np.sqrt(var / n)
        if bounded:
            c = t_boundary(design.two_sided[k], n - 1)
            b = t_boundary(design.one_sided[k], n - 1)
        else:
            c = stats.t.isf(design.alpha / 2, n - 1)
            b = stats.t.isf(design.alpha, n - 1)
        different = np.abs(mean) >= c * se
        equivalent = ~different & (mean - b * se > -margin) & (mean + b * se < margin)
        for name, hit in ((DIFFERENT, different), (EQUIVALENT, equivalent)):
            new = hit & ~decided & (se > 0)
            verdict[new] = name
            used[new] = n
            decided |= new
    return {
        DIFFERENT: float(np.mean(verdict == DIFFERENT)),
        EQUIVALENT: float(np.mean(verdict == EQUIVALENT)),
        UNDECIDED: float(np.mean(verdict == UNDECIDED)),
        "mean_n": float(np.mean(used)),
    }


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A declared comparison: `variant` minus `other`, paired by seed, on one metric."""

    variant: str
    other: str
    metric: str
    held_fixed: str = ""

    @property
    def label(self) -> str:
        return f"{self.variant} − {self.other}"


def comparisons(sweep) -> list[Comparison]:
    """Every comparison the stopping rule judges, on each metric with an equivalence margin: a
    factorial sweep's simple effects (each cell against the cell with one factor at its
    reference level and the others held fixed, where the sweep trains both) and every variant
    beside the grid against the baseline; a flat sweep's variants against the baseline."""
    names = {sweep.cell_of(v): v for v in sweep.variants if sweep.cell_of(v) is not None}
    pairs = []
    factors = sweep.trained_factors
    for cell, name in names.items():
        for i, factor in enumerate(factors):
            if cell[i] == factor.reference:
                continue
            other = names.get((*cell[:i], factor.reference, *cell[i + 1 :]))
            if other is not None:
                held = ", ".join(
                    f"{f.name}={level}"
                    for j, (f, level) in enumerate(zip(factors, cell, strict=True))
                    if j != i
                )
                pairs.append((name, other, held))
    pairs += [(v, sweep.baseline, "") for v in sweep.variants if v not in names.values()]
    pairs = [p for p in pairs if p[0] != p[1]]
    return [Comparison(v, o, m, h) for m in sweep.equivalence_margins for v, o, h in pairs]


Values = Mapping[
    str, Mapping[int, float | None]
]  # variant -> confirm seed -> metric (None: not done)


def look_deltas(values: Values, comparison: Comparison, seeds: Sequence[int]) -> list[float] | None:
    """The paired deltas of one look over `seeds` (the round's confirmation seeds), or None
    while a run of either side is not done. values: variant -> seed -> value, a done run
    without the metric (diverged) NaN, not paired."""
    a, b = values.get(comparison.variant, {}), values.get(comparison.other, {})
    if any(s not in a or s not in b for s in seeds):
        return None
    return [a[s] - b[s] for s in seeds if not (math.isnan(a[s]) or math.isnan(b[s]))]


def decide(sweep, values_by_metric: Mapping[str, Values]) -> dict[Comparison, Decision | None]:
    """Every comparison's decision from the looks its runs allow (None before the first)."""
    design = Design(sweep.confirm_rounds, sweep.spending)
    out = {}
    for c in comparisons(sweep):
        values = values_by_metric[c.metric]
        looks = []
        for n in sweep.confirm_rounds:
            deltas = look_deltas(values, c, sweep.confirm_seeds[:n])
            if deltas is None:
                break
            looks.append(deltas)
        out[c] = judge(looks, sweep.equivalence_margins[c.metric], design)
    return out


def seeds_wanted(sweep, values_by_metric: Mapping[str, Values], chosen: Sequence[str]):
    """variant -> the confirmation seeds to train now, for the variants in `chosen` (those whose
    setting is chosen): the first round, and one round past the last look of each comparison it
    takes part in that is still undecided (the next look needs it). A comparison waits until
    both its cells are chosen; a cell in no comparison trains the first round only."""
    rounds = sweep.confirm_rounds
    want = dict.fromkeys(chosen, rounds[0])
    for c, decision in decide(sweep, values_by_metric).items():
        if c.variant not in want or c.other not in want:
            continue
        if decision is not None and (decision.verdict != UNDECIDED or decision.final):
            continue
        looks = 0 if decision is None else decision.looks
        n = rounds[min(looks, len(rounds) - 1)]
        for v in (c.variant, c.other):
            want[v] = max(want[v], n)
    return {v: sweep.confirm_seeds[:n] for v, n in want.items()}


def fixed_n(delta: float, sd: float, margin: float, alpha: float = ALPHA, power: float = 0.8):
    """Seeds a fixed-n paired test needs at power `power` (normal approximation): to exclude 0
    at a true delta, and to show equivalence at the true delta (|delta| < margin)."""
    z = stats.norm.isf
    different = ((z(alpha / 2) + z(1 - power)) * sd / delta) ** 2 if delta else math.inf
    gap = margin - abs(delta)
    beta = (1 - power) / 2 if delta == 0 else 1 - power
    equivalent = ((z(alpha) + z(beta)) * sd / gap) ** 2 if gap > 0 else math.inf
    return math.ceil(different) if math.isfinite(different) else different, (
        math.ceil(equivalent) if math.isfinite(equivalent) else equivalent
    )


def confirm_values(sweep, runs, settings: Mapping[str, str]) -> dict[str, dict]:
    """metric -> variant -> confirm seed -> value of each chosen variant's confirmation runs
    (runs: run variant -> records; settings: variant -> chosen setting): a done run without the
    metric (diverged) NaN, a run not done left out."""
    out: dict[str, dict] = {m: {} for m in sweep.equivalence_margins}
    for variant, setting in settings.items():
        for record in runs.get(confirm_run_variant(variant, setting), ()):
            if record.status not in ("finished", "diverged"):
                continue
            for metric, by_variant in out.items():
                value = record.metric(metric) if record.status == "finished" else None
                by_variant.setdefault(variant, {})[record.seed] = (
                    math.nan if value is None else value
                )
    return out
