"""Tuned comparisons: each variant at its own best nuisance setting, chosen on validation.

A sweep with nuisance factors (sweep/nuisance.py) trains every variant at every setting of the
nuisance grid. Here the report chooses, from the validation metric `select_on` alone, the
setting each variant is compared at:

- select_per="cell": one setting per variant, the best mean of select_on over the seeds;
- select_per="seed": every seed its own best setting (the paired comparisons stay paired by
  seed: both sides of a difference use the same seed, each at its own setting).

A diverged run scores worst. A choice is made only once every setting it chooses among is done
(finished or diverged); until then the variant (or seed) counts as missing. The choice itself is
sweep/selection.py's, which the runner also calls to know what the confirmation runs
(confirm_seeds) retrain; with them, every tuned figure comes from those runs.

What tuning changed is reported beside the tuned tables: the chosen values with a flag when
one sits at the edge of its grid, every metric at the shared default (the base config's values,
the untuned sweep) beside the tuned one, and for every comparison whether its verdict (sign,
`*`, `†`) is kept, and as its sensitivity the same comparison at each cell's runner-up
setting with a mark where a cell's two best settings are a near tie. For a second nuisance key
(warmup beside the learning rate), each variant's best at each of its values, so that "needs
warmup" can be read as its own question. The isolation plots (the Tuning Playbook's) draw
select_on against the learning rate, one line per variant.
"""

import csv
import dataclasses
import io
import math
from collections.abc import Mapping, Sequence

from transformer_jax.report import factorial, stats, summary
from transformer_jax.report.summary import VariantSummary
from transformer_jax.report.tables import (
    HOLM,
    SIGNIFICANT,
    format_mean_std,
    format_paired,
    survives_holm,
)
from transformer_jax.sweep import nuisance as nuisance_lib
from transformer_jax.sweep import selection
from transformer_jax.sweep.selection import RunnerUp, choose
from transformer_jax.sweep.spec import Sweep
from transformer_jax.sweep_dir import RunRecord

SELECTION_CSV = "selection.csv"
NEAR_TIE = "≈"  # the best and runner-up settings' validation means are within their seed spread
# The nuisance key on the isolation plots' x axis when the grid has it.
LEARNING_RATE = "train.learning_rate"


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The selection and the views of the sweep it gives.

    chosen: variant -> seed -> chosen setting (seeds not yet choosable left out).
    tuned / untuned: variant -> one record per seed, at the chosen setting / the default one
      (a "missing" record where there is none), the input of summary.summarize. With
      confirm_seeds, tuned holds the confirmation runs (one per confirm seed), never a
      selection run; untuned stays the selection runs at the default setting.
    runner_up: variant -> its second-best setting with the near-tie test (select_per="cell",
      once its choice is made); second: variant -> one selection record per seed at it.
    """

    chosen: dict[str, dict[int, str]]
    tuned: dict[str, tuple[RunRecord, ...]]
    untuned: dict[str, tuple[RunRecord, ...]]
    notes: tuple[str, ...] = ()
    runner_up: dict[str, RunnerUp] = dataclasses.field(default_factory=dict)
    second: dict[str, tuple[RunRecord, ...]] = dataclasses.field(default_factory=dict)


def _missing(record: RunRecord, variant: str) -> RunRecord:
    return RunRecord(variant, record.seed, record.path, "missing")


def _x_key(sweep: Sweep) -> str:
    """The isolation plots' x axis: the learning rate, or the first nuisance key without one."""
    return LEARNING_RATE if LEARNING_RATE in sweep.nuisance else next(iter(sweep.nuisance))


def select(sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]]) -> Tuning:
    """Chooses every variant's setting from runs (run variant -> records, summary.read_runs).

    The choice reads select_on alone: the test metrics cannot influence it. With confirm_seeds
    the tuned records are the confirmation runs at the chosen setting.
    """
    chosen = selection.chosen(sweep, runs)
    tuned, untuned, runner_up, second = {}, {}, {}, {}
    for variant in sweep.variants:
        by_setting = {
            s: {r.seed: r for r in runs[nuisance_lib.run_variant(variant, s)]}
            for s in sweep.settings_of(variant)
        }
        first = by_setting[next(iter(by_setting))]
        tuned[variant] = _tuned(sweep, runs, variant, chosen[variant], by_setting)
        default = by_setting.get(sweep.default_setting)
        untuned[variant] = _at(variant, default, first, sweep.seeds)
        up = None
        if sweep.select_per == "cell":
            scores = selection.variant_scores(sweep, runs, variant)
            up = selection.runner_up(scores, sweep.seeds, sweep.select_mode)
        if up is not None:
            runner_up[variant] = up
        second[variant] = _at(variant, up and by_setting[up.setting], first, sweep.seeds)
    notes = _absent(sweep, runs) + _stale(sweep, runs, chosen)
    return Tuning(chosen, tuned, untuned, notes, runner_up, second)


def _missing(record: RunRecord, variant: str) -> RunRecord:
    return RunRecord(variant, record.seed, record.path, "missing")


def _at(variant, records, first, seeds) -> tuple[RunRecord, ...]:
    """One record per seed of `records` (seed -> record; None: every one missing), named
    `variant`."""
    return tuple(
        dataclasses.replace(records[seed], variant=variant)
        if records
        else _missing(first[seed], variant)
        for seed in seeds
    )


def _tuned(sweep, runs, variant, chosen, by_setting) -> tuple[RunRecord, ...]:
    """The records the tuned comparison reads: the confirmation runs at the chosen setting, or
    without confirm_seeds the selection runs each seed chose."""
    if sweep.confirm_seeds:
        if not chosen:
            return tuple(
                RunRecord(variant, s, f"{variant}/{nuisance_lib.CONFIRM}", "missing")
                for s in sweep.confirm_seeds
            )
        name = nuisance_lib.confirm_run_variant(variant, next(iter(chosen.values())))
        records = runs.get(name, ())
        if sweep.confirm_rounds:
            # Seeds until decided: the rounds a cell did not need are not missing runs.
            first = set(sweep.confirm_seeds[: sweep.confirm_rounds[0]])
            records = [r for r in records if r.status != "missing" or r.seed in first]
        return tuple(dataclasses.replace(r, variant=variant) for r in records)
    first = by_setting[next(iter(by_setting))]
    return tuple(
        dataclasses.replace(by_setting[chosen[seed]][seed], variant=variant)
        if seed in chosen
        else _missing(first[seed], variant)
        for seed in sweep.seeds
    )


def _stale(sweep, runs, chosen) -> tuple[str, ...]:
    """A note per variant with confirmation runs at a setting it no longer chooses."""
    settings = {v: next(iter(c.values())) for v, c in chosen.items() if c}
    return tuple(
        f"confirmation runs of {variant} exist at {', '.join(others)}, but the selection now "
        f"chooses {settings[variant]}: they are not reported (the selection runs changed after "
        "they were trained)"
        for variant, others in selection.stale_confirmations(sweep, runs, settings).items()
    )


def recorded_runs(sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]]) -> list[RunRecord]:
    """The runs runs.csv lists: every selection run, and of the confirmation runs those started
    and those of each chosen setting (not the candidates at every other setting)."""
    wanted = (
        {
            nuisance_lib.confirm_run_variant(v, s)
            for v, s in selection.confirm_settings(sweep, runs).items()
        }
        if sweep.confirm_seeds
        else set()
    )
    return [
        r
        for name, records in runs.items()
        for r in records
        if not nuisance_lib.is_confirm(name) or name in wanted or r.status != "missing"
    ]


def _absent(sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]]) -> tuple[str, ...]:
    """A note when finished runs lack select_on (their variants' choices stay pending)."""
    lacking = [
        r
        for records in runs.values()
        for r in records
        if r.status == "finished" and r.metric(sweep.select_on) is None
    ]
    if not lacking:
        return ()
    splits = sorted({split for r in lacking for split in r.metrics})
    return (
        f"{sweep.select_on} (select_on) is absent from {len(lacking)} finished run(s), e.g. "
        f"{lacking[0].variant}/seed_{lacking[0].seed}, so their variants have no chosen "
        f"setting; they report the splits {', '.join(splits) or 'none'} (an algorithmic task "
        "has a validation split only with data.num_validation > 0)",
    )


def comparisons(
    sweep: Sweep, rows: Sequence[VariantSummary], confidence: float = 0.95
) -> list[tuple[str, factorial.Comparison]]:
    """(table title, comparison) for every comparison the report's tables make, Holm-adjusted
    per table as there: a factorial sweep's effects, a flat sweep's variants - baseline."""
    tables = factorial.metric_tables(sweep, rows, confidence)
    if tables:
        return [(t.title, c) for t in tables for c in t.comparisons]
    out = []
    for metric in sweep.metrics:
        values = {row.name: dict(row.metrics[metric].values) for row in rows}
        family = factorial.flat_comparisons(values, sweep.baseline, confidence)
        out += [(metric, c) for c in factorial.with_holm(family)]
    return out


def verdict(c: factorial.Comparison, confidence: float) -> str:
    """Sign of the difference with its markers ("+*†", "−", "0"); "" without a paired seed."""
    d = c.diff
    if d.n == 0 or math.isnan(d.mean):
        return ""
    sign = "+" if d.mean > 0 else "−" if d.mean < 0 else "0"
    holm = HOLM if survives_holm(c.p_holm, confidence) else ""
    return sign + (SIGNIFICANT if d.excludes_zero else "") + holm


def _values(setting: Mapping[str, object]) -> str:
    return ", ".join(f"{k.rpartition('.')[2]}={v}" for k, v in setting.items())


def chosen_text(sweep: Sweep, chosen: Mapping[int, str], variant: str = "") -> tuple[str, str]:
    """(the chosen values, the edge-of-grid flag) of one variant, per seed when they differ;
    the edge is that of the values the variant tried (its grid extended or not)."""
    if not chosen:
        return "pending (not every setting done)", ""
    distinct = list(dict.fromkeys(chosen.values()))
    tried = sweep.settings_of(variant) if variant else sweep.grid_settings
    grid = {k: sorted({s[k] for s in tried.values()}, key=repr) for k in sweep.nuisance}
    edges = sorted({k for s in distinct for k in nuisance_lib.on_edge(grid, sweep.settings[s])})
    flag = ("⚠ " + ", ".join(k.rpartition(".")[2] for k in edges)) if edges else ""
    if len(distinct) == 1:
        return _values(sweep.settings[distinct[0]]), flag
    parts = [f"seed {seed}: {_values(sweep.settings[s])}" for seed, s in chosen.items()]
    return "; ".join(parts), flag


def section(
    sweep: Sweep,
    tuning: Tuning,
    tuned_rows: Sequence[VariantSummary],
    untuned_rows: Sequence[VariantSummary],
    digits: int = 3,
    confidence: float = 0.95,
) -> list[str]:
    """The report's "Tuning" section (Markdown lines)."""
    split = sweep.select_on.partition("/")[0]
    grid = "; ".join(f"`{k}` ∈ {{{', '.join(map(str, vs))}}}" for k, vs in sweep.nuisance.items())
    per = (
        "one setting per variant, the best mean over its seeds"
        if sweep.select_per == "cell"
        else "each seed its own best setting"
    )
    default = _values(sweep.nuisance_default) if sweep.nuisance_default else "unknown"
    lines = [
        f"Nuisance grid: {grid} ({len(sweep.settings)} settings per variant and seed). Every "
        f"comparison above is made at the tuned settings: chosen on split `{split}` by "
        f"`{sweep.select_on}` ({'larger' if sweep.select_mode == 'max' else 'smaller'} is "
        f"better), {per} (select_per={sweep.select_per}); a diverged run scores worst. The "
        "selection reads no test split. Untuned: every variant at the shared default of the "
        f"base config ({default}).",
        "",
    ]
    if sweep.confirm_seeds:
        lines += [confirm_text(sweep), ""]
    header = ["Variant", "Chosen", "Edge of grid", "Runner-up", f"`{sweep.select_on}` best / 2nd"]
    for m in sweep.metrics:
        header += [f"`{m}` untuned", "tuned"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    untuned_by_name = {row.name: row for row in untuned_rows}
    for row in tuned_rows:
        values, flag = chosen_text(sweep, tuning.chosen[row.name], row.name)
        cells = [row.name, values, flag, *runner_up_text(sweep, tuning, row.name, digits)]
        for m in sweep.metrics:
            cells += [
                format_mean_std(untuned_by_name[row.name].metrics[m], digits),
                format_mean_std(row.metrics[m], digits),
            ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += [
        "",
        "⚠: the chosen value is the smallest or largest of its grid; the best may lie beyond "
        "it, so the grid should be widened. Runner-up: the second-best setting, with the mean "
        f"`{sweep.select_on}` over the selection seeds at the best and at it, and in brackets "
        "their seed spread: the larger of the two settings' sample standard deviations "
        f"(ddof=1) of `{sweep.select_on}` over those seeds. {NEAR_TIE}: a near tie, the two "
        "means differ by less than that spread (another draw of seeds may well choose the "
        "runner-up).",
        "",
        "### Verdicts untuned and tuned",
        "",
    ]
    before = {
        (t, c.label, c.held_fixed): c for t, c in comparisons(sweep, untuned_rows, confidence)
    }
    header = ["Metric", "Comparison", "Held fixed", "Untuned Δ", "Tuned Δ", "Runner-up Δ"]
    header += ["Near tie", "Verdict"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    second_rows = summary.summarize(sweep, tuning.second, confidence)
    second = {(t, c.label, c.held_fixed): c for t, c in comparisons(sweep, second_rows, confidence)}
    changed = 0
    for title, c in comparisons(sweep, tuned_rows, confidence):
        u = before.get((title, c.label, c.held_fixed))
        if c.diff.n == 0 and (u is None or u.diff.n == 0):
            continue  # Cells without finished runs on either side: nothing to compare yet.
        old = verdict(u, confidence) if u else ""
        new = verdict(c, confidence)
        if not old or not new:
            status = "–"
        elif old == new:
            status = "kept"
        else:
            status, changed = f"**changed** ({old} → {new})", changed + 1
        r = second.get((title, c.label, c.held_fixed))
        ties = [name for _, name in c.terms if _is_near_tie(tuning, name)]
        cells = [
            f"`{title}`",
            c.label,
            c.held_fixed or "–",
            format_paired(u.diff, digits, survives_holm(u.p_holm, confidence)) if u else "–",
            format_paired(c.diff, digits, survives_holm(c.p_holm, confidence)),
            format_paired(r.diff, digits, survives_holm(r.p_holm, confidence))
            if r and r.diff.n
            else "–",
            f"{NEAR_TIE} {', '.join(ties)}" if ties else "",
            status,
        ]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    lines += [
        "",
        f"A verdict is the sign of Δ with its markers (`{SIGNIFICANT}`, {HOLM}, as in the tables "
        f"above); {changed} changed under tuning. Untuned Δ: the selection runs at the shared "
        "default. Tuned Δ: "
        + (
            f"the confirmation runs (seeds {', '.join(map(str, sweep.confirm_seeds))}), "
            "none of which took part in the choice. "
            if sweep.confirm_seeds
            else "the selection runs at the chosen settings. "
        )
        + "Runner-up Δ: the same comparison with every cell at its runner-up setting, on the "
        f"selection seeds ({', '.join(map(str, sweep.seeds))}): how far the figure depends on "
        f"the choice (select_per=cell only). Near tie: the cells of the comparison whose choice "
        f"is a near tie ({NEAR_TIE}, above).",
    ]
    return lines


def confirm_text(sweep: Sweep) -> str:
    """The sentence saying where the tuned figures come from, with confirmation seeds."""
    return (
        f"Confirmation: each variant's chosen setting was trained again on the fresh seeds "
        f"{', '.join(map(str, sweep.confirm_seeds))} (WORKDIR/<variant>/"
        f"{nuisance_lib.CONFIRM}/<setting>/). Every test figure, Δ and verdict of the tables "
        "above and of the tuned columns here comes from these confirmation runs; the selection "
        f"runs (seeds {', '.join(map(str, sweep.seeds))}) only chose, on validation, and give "
        "the untuned and runner-up columns."
    )


def _is_near_tie(tuning: Tuning, variant: str) -> bool:
    up = tuning.runner_up.get(variant)
    return up is not None and up.near_tie


def runner_up_text(sweep: Sweep, tuning: Tuning, variant: str, digits: int) -> tuple[str, str]:
    """(the runner-up's values, "best / runner-up (spread)" of select_on with the near-tie
    mark) of one variant; dashes before its choice (or with select_per="seed")."""
    up = tuning.runner_up.get(variant)
    if up is None:
        return "–", "–"
    # Significant digits: validation losses near 0 (0.00543 against 0.00564) must stay apart.
    fmt = f"#.{digits + 1}g"
    spread = "–" if math.isnan(up.spread) else format(up.spread, fmt)
    scores = f"{format(up.best_mean, fmt)} / {format(up.runner_up_mean, fmt)} ({spread})"
    return _values(sweep.settings[up.setting]), scores + (f" {NEAR_TIE}" if up.near_tie else "")


def best_at_each_value(
    sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]]
) -> dict[str, dict[str, dict[object, str]]]:
    """key -> variant -> value -> the setting chosen among those with key = value, as the
    selection chooses (select_on alone, select_per="cell"), for every nuisance key but the
    isolation plots' x axis; a value without a possible choice yet is left out.

    "Does post-norm need warmup?" is a question about one nuisance key: compare the best the
    variant reaches with and without it, each at its own learning rate.
    """
    x_key = _x_key(sweep)
    out: dict[str, dict[str, dict[object, str]]] = {}
    for key in sweep.nuisance:
        if key == x_key:
            continue
        out[key] = {}
        for variant in sweep.variants:
            out[key][variant] = {}
            for value in sweep.nuisance[key]:
                at_value = [
                    s for s, setting in sweep.settings_of(variant).items() if setting[key] == value
                ]
                scores = selection.variant_scores(sweep, runs, variant, at_value)
                chosen = choose(scores, sweep.seeds, sweep.select_mode, "cell")
                if chosen:
                    out[key][variant][value] = chosen[sweep.seeds[0]]
    return out


def best_at_each_value_lines(
    sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]], digits: int = 3
) -> list[str]:
    """A table per nuisance key (but the learning rate): each variant's best setting at each of
    its values, with the mean select_on there and the first metric's mean, for reading a
    nuisance key as a question of its own (Markdown lines; none for a one-key grid)."""
    lines: list[str] = []
    metric = sweep.metrics[0]
    for key, by_variant in best_at_each_value(sweep, runs).items():
        name = key.rpartition(".")[2]
        header = ["Variant"]
        for value in sweep.nuisance[key]:
            header += [f"{name}={value}: best", f"`{sweep.select_on}`", f"`{metric}`"]
        lines += [
            "",
            f"### Each variant's best at each value of `{name}`",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for variant, chosen in by_variant.items():
            cells = [variant]
            for value in sweep.nuisance[key]:
                setting = chosen.get(value)
                if setting is None:
                    cells += ["pending", "", ""]
                    continue
                records = runs[nuisance_lib.run_variant(variant, setting)]
                others = {k: v for k, v in sweep.settings[setting].items() if k != key}
                cells += [_values(others)] + [
                    _mean_of(records, m, digits) for m in (sweep.select_on, metric)
                ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            f"At each value of `{name}` the other nuisance values are chosen as the selection "
            f"chooses (`{sweep.select_on}`, the best mean over seeds); `{metric}` is the mean "
            "over the finished seeds of that setting, shown, not used to choose.",
        ]
    return lines


def _mean_of(records: Sequence[RunRecord], metric: str, digits: int) -> str:
    values = [v for r in records if r.status == "finished" and (v := r.metric(metric)) is not None]
    diverged = sum(r.status == "diverged" for r in records)
    text = f"{stats.mean(values):.{digits}f}" if values else "–"
    return text + (f" ({diverged} diverged)" if diverged else "")


def isolation_curves(
    sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]]
) -> tuple[str, dict[str, list[tuple[float, float]]]]:
    """(x key, variant -> [(x, y)]): the mean over finished seeds of select_on at each value of
    the learning rate (or the first nuisance key), the best over the other nuisance keys."""
    key = _x_key(sweep)
    sign = 1.0 if sweep.select_mode == "max" else -1.0
    out = {}
    for variant in sweep.variants:
        best: dict[float, float] = {}
        for name, setting in sweep.settings_of(variant).items():
            records = runs[nuisance_lib.run_variant(variant, name)]
            values = [
                v
                for r in records
                if r.status == "finished" and (v := r.metric(sweep.select_on)) is not None
            ]
            if not values:
                continue
            x, y = float(setting[key]), stats.mean(values)
            if x not in best or sign * y > sign * best[x]:
                best[x] = y
        out[variant] = sorted(best.items())
    return key, out


def selection_csv(sweep: Sweep, tuning: Tuning, runs: Mapping[str, Sequence[RunRecord]]) -> str:
    """One row per (variant, seed): the chosen setting, its values and its select_on score."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["variant", "seed", "setting", *sweep.nuisance, sweep.select_on])
    for variant, chosen in tuning.chosen.items():
        for seed in sweep.seeds:
            setting = chosen.get(seed, "")
            values = (
                list(sweep.settings[setting].values()) if setting else [""] * len(sweep.nuisance)
            )
            value = ""
            if setting:
                record = next(
                    r for r in runs[nuisance_lib.run_variant(variant, setting)] if r.seed == seed
                )
                v = record.metric(sweep.select_on)
                value = "" if v is None else repr(v)
            writer.writerow([variant, seed, setting, *values, value])
    return out.getvalue()
