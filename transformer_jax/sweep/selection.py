"""Choosing each variant's nuisance setting from validation, for the runner and the report alike.

The runner needs the choice to know which setting the confirmation runs retrain
(Sweep.confirm_seeds); the report needs it to know which runs it compares
(report/tuning.py). Both call `choose` here, so the setting a confirmation run trained at is
the one the report later reads its figures from.

The choice reads `select_on` and nothing else of a run; a diverged run scores worst, and a
choice is made only once every setting it chooses among is done (finished or diverged).
"""

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

from transformer_jax.sweep import nuisance as nuisance_lib
from transformer_jax.sweep.spec import Sweep
from transformer_jax.sweep_dir import RunRecord, read_run

Scores = Mapping[str, Mapping[int, float | None]]  # setting -> seed -> score (None: not done)


def score(record: RunRecord, select_on: str, mode: str) -> float | None:
    """What one run scores for the selection: its select_on value (a diverged run the worst
    possible), or None while it is not done. Reads select_on and nothing else of the run."""
    if record.status == "diverged":
        return -math.inf if mode == "max" else math.inf
    if record.status != "finished":
        return None
    return record.metric(select_on)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def ranked(candidates: Mapping[str, float], mode: str) -> list[str]:
    """The keys best first; among ties the first in order."""
    sign = 1.0 if mode == "max" else -1.0
    order = list(candidates)
    return sorted(candidates, key=lambda k: (-sign * candidates[k], order.index(k)))


def choose(scores: Scores, seeds: Sequence[int], mode: str, per: str) -> dict[int, str]:
    """seed -> the chosen setting, from scores; seeds whose choice is not yet possible are left
    out.

    per="cell": every seed gets the setting with the best mean score over the seeds (only once
    every setting has every seed done); per="seed": each seed its best setting (once that seed
    is done at every setting).
    """
    if per == "cell":
        means = cell_means(scores, seeds)
        return dict.fromkeys(seeds, ranked(means, mode)[0]) if means else {}
    out = {}
    for seed in seeds:
        by_setting = {s: scores[s].get(seed) for s in scores}
        if all(v is not None for v in by_setting.values()):
            out[seed] = ranked(by_setting, mode)[0]
    return out


def cell_means(scores: Scores, seeds: Sequence[int]) -> dict[str, float]:
    """setting -> mean score over the seeds; {} until every setting has every seed done."""
    if any(scores[s].get(seed) is None for s in scores for seed in seeds):
        return {}
    return {s: _mean([scores[s][seed] for seed in seeds]) for s in scores}


@dataclasses.dataclass(frozen=True)
class RunnerUp:
    """A variant's second-best setting (select_per="cell") and whether it is a near-tie.

    best_mean / runner_up_mean: mean select_on over the selection seeds at each; spread: the
    larger of the two settings' sample standard deviations (ddof=1) of select_on over the seeds
    (NaN with one seed, or when a run diverged); near_tie: |best_mean - runner_up_mean| < spread.
    """

    setting: str
    best_mean: float
    runner_up_mean: float
    spread: float

    @property
    def near_tie(self) -> bool:
        return abs(self.best_mean - self.runner_up_mean) < self.spread


def runner_up(scores: Scores, seeds: Sequence[int], mode: str) -> RunnerUp | None:
    """The runner-up of a one-setting-per-variant choice (`choose` with per="cell"); None until
    the choice can be made."""
    means = cell_means(scores, seeds)
    if not means:
        return None
    best, second = ranked(means, mode)[:2]
    stds = []
    for setting in (best, second):
        values = [scores[setting][seed] for seed in seeds]
        finite = len(values) > 1 and all(math.isfinite(v) for v in values)
        stds.append(statistics.stdev(values) if finite else math.nan)
    spread = math.nan if any(math.isnan(s) for s in stds) else max(stds)
    return RunnerUp(second, means[best], means[second], spread)


def variant_scores(
    sweep: Sweep,
    runs: Mapping[str, Sequence[RunRecord]],
    variant: str,
    settings: Sequence[str] | None = None,
) -> dict[str, dict[int, float | None]]:
    """setting -> seed -> score (select_on alone) of one variant's selection runs at `settings`
    (default: every setting)."""
    settings = sweep.settings_of(variant) if settings is None else settings
    return {
        s: {
            r.seed: score(r, sweep.select_on, sweep.select_mode)
            for r in runs[nuisance_lib.run_variant(variant, s)]
        }
        for s in settings
    }


def chosen(sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]]) -> dict[str, dict[int, str]]:
    """variant -> seed -> chosen setting (seeds not yet choosable left out), from the selection
    runs (run variant -> records, `read_runs`)."""
    return {
        variant: choose(
            variant_scores(sweep, runs, variant), sweep.seeds, sweep.select_mode, sweep.select_per
        )
        for variant in sweep.variants
    }


def confirm_settings(sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]]) -> dict[str, str]:
    """variant -> the setting its confirmation runs train at, for the variants whose selection
    is complete (select_per="cell": one setting per variant)."""
    return {v: next(iter(c.values())) for v, c in chosen(sweep, runs).items() if c}


def read_runs(sweep: Sweep, workdir: str) -> dict[str, tuple[RunRecord, ...]]:
    """Every run of the sweep from its run directory: run variant -> one record per seed. The
    selection's run variants (sweep.run_variants) have a record per seed of sweep.seeds, the
    confirmation ones (sweep.confirm_run_variants, every setting) one per confirm seed."""
    runs = {
        name: tuple(read_run(workdir, name, seed) for seed in sweep.seeds)
        for name in sweep.run_variants
    }
    for name in sweep.confirm_run_variants:
        runs[name] = tuple(read_run(workdir, name, seed) for seed in sweep.confirm_seeds)
    return runs


def stale_confirmations(
    sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]], settings: Mapping[str, str]
) -> dict[str, list[str]]:
    """variant -> the settings (other than its chosen one in `settings`) at which confirmation
    runs exist: trained under a selection that has since changed."""
    out: dict[str, list[str]] = {}
    for variant, setting in settings.items():
        for other in sweep.settings_of(variant):
            name = nuisance_lib.confirm_run_variant(variant, other)
            if other != setting and any(r.status != "missing" for r in runs.get(name, ())):
                out.setdefault(variant, []).append(other)
    return out


def check_confirmations(sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]]) -> dict[str, str]:
    """confirm_settings, after raising ValueError when confirmation runs exist at a setting the
    selection no longer chooses (their figures would describe another choice)."""
    settings = confirm_settings(sweep, runs)
    stale = stale_confirmations(sweep, runs, settings)
    if stale:
        variant, others = next(iter(stale.items()))
        raise ValueError(
            f"confirmation runs of {variant} were trained at {', '.join(others)}, but the "
            f"selection now chooses {settings[variant]} (its selection runs changed since); use "
            f"a new --workdir, or delete {variant}/{nuisance_lib.CONFIRM}/{others[0]} to retrain "
            "the confirmation"
        )
    return settings
