"""Grids that contain their optimum: the boundary check of the Deep Learning Tuning Playbook.

The Playbook (Godbole et al. 2023, "Identifying bad search space boundaries") asks of every
tuned hyperparameter whether the best trial lies near the edge of its search space; if it does,
the best may lie outside, and the space should be widened. With `Sweep.grid_extension`
(nuisance.GridExtension) the runner does that per cell, from the selection runs' validation
metric (`select_on`) alone, once every setting of the cell is done:

- the axis of key k at the best setting is the values of k the cell has tried with the best's
  other values; the best is on an edge when it is the axis' largest value, or its smallest and
  not 0 (nothing lies below no warmup);
- it is extended when the inner neighbour's mean is worse than the best's by more than both the
  declared margin and the seed spread (the larger sample sd of the two settings' seeds): on
  flat ground the edge does not matter;
- the new value continues the axis by its own step at that edge: the ratio of the two outer
  values where both are > 0 (geometric, as learning rates are), else their difference; rounded
  to 3 significant digits (an integer key to an integer);
- the new settings (the best's other values, k at the new value) train on the selection seeds,
  and the check repeats, up to `max_rounds` extensions per cell. A value past which every seed
  diverges scores worst (selection.score), so the best stays inside: a real edge;
- with `refine`, once no edge needs extending (or the rounds are spent), one round adds the
  values between the best and each neighbour at half the step.

Each extension is recorded in WORKDIR/grid_extensions.json (written atomically, before its runs
start) with the scores that asked for it; the report and every later launch read the settings
from it (`applied`), so a run killed at any point resumes with the same grid and nothing
selected is withdrawn. A cell's choice is final, and its confirmation runs start, once its
grid needs nothing more (`final`).
"""

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from transformer_jax.run_dir import read_json, write_json
from transformer_jax.sweep import nuisance as nuisance_lib
from transformer_jax.sweep import selection
from transformer_jax.sweep.spec import Sweep
from transformer_jax.sweep_dir import RunRecord

RECORD_FILE = "grid_extensions.json"
EXTEND, REFINE = "extend", "refine"


def read_record(workdir: str) -> list[dict[str, Any]]:
    """The extensions recorded so far (oldest first); [] when there are none."""
    record = read_json(f"{workdir}/{RECORD_FILE}")
    return list(record.get("extensions", [])) if isinstance(record, dict) else []


def applied(sweep: Sweep, workdir: str) -> Sweep:
    """The sweep with the settings its record added (Sweep.extra_settings); unchanged without
    grid_extension."""
    if sweep.grid_extension is None:
        return sweep
    return with_entries(sweep, read_record(workdir))


def with_entries(sweep: Sweep, entries: Sequence[Mapping[str, Any]]) -> Sweep:
    extra: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        extra.setdefault(entry["variant"], []).extend(entry["settings"])
    return dataclasses.replace(sweep, extra_settings={v: tuple(s) for v, s in extra.items()})


def _round(value: float, integer: bool) -> int | float:
    if integer:
        return int(round(value))
    return float(f"{value:.3g}")


def _axis(sweep: Sweep, variant: str, key: str, best: Mapping[str, Any]) -> dict[Any, str]:
    """value -> setting name along key through the best setting (its other values fixed)."""
    out = {}
    for name, setting in sweep.settings_of(variant).items():
        if all(setting[k] == best[k] for k in setting if k != key):
            out[setting[key]] = name
    return dict(sorted(out.items()))


def _spread(scores, a: str, b: str, seeds) -> float:
    values = [[scores[s][seed] for seed in seeds] for s in (a, b)]
    if len(seeds) < 2 or not all(math.isfinite(v) for vs in values for v in vs):
        return 0.0
    return max(statistics.stdev(vs) for vs in values)


def edges(sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]], variant: str) -> dict[str, str]:
    """key -> "upper" or "lower" for each checked key whose best value lies on an edge of the
    cell's tried values (needing extension or not); {} until its choice can be made."""
    scores = selection.variant_scores(sweep, runs, variant, sweep.settings_of(variant))
    means = selection.cell_means(scores, sweep.seeds)
    if not means:
        return {}
    best = sweep.settings[selection.ranked(means, sweep.select_mode)[0]]
    keys = sweep.grid_extension.keys if sweep.grid_extension else tuple(sweep.nuisance)
    out = {}
    for key in keys:
        axis = list(_axis(sweep, variant, key, best))
        if not all(nuisance_lib._is_number(v) for v in axis) or len(axis) < 2:
            continue
        if best[key] == axis[-1]:
            out[key] = "upper"
        elif best[key] == axis[0] and best[key] != 0:
            out[key] = "lower"
    return out


def proposals(
    sweep: Sweep, runs: Mapping[str, Sequence[RunRecord]], variant: str, done: int, refined: bool
) -> list[dict[str, Any]]:
    """The record entries this cell asks for now (empty when its grid needs nothing more or a
    setting is not done): one per key, `done` extension rounds already made."""
    ext = sweep.grid_extension
    scores = selection.variant_scores(sweep, runs, variant, sweep.settings_of(variant))
    means = selection.cell_means(scores, sweep.seeds)
    if ext is None or not means:
        return []
    sign = 1.0 if sweep.select_mode == "min" else -1.0
    best_name = selection.ranked(means, sweep.select_mode)[0]
    best = sweep.settings[best_name]
    entries = []
    if done < ext.max_rounds:
        for key, side in edges(sweep, runs, variant).items():
            axis = _axis(sweep, variant, key, best)
            values = list(axis)
            inner = values[-2] if side == "upper" else values[1]
            gap = sign * (means[axis[inner]] - means[best_name])
            spread = _spread(scores, best_name, axis[inner], sweep.seeds)
            if not gap > max(ext.margin, spread):
                continue
            edge = best[key]
            new = edge * (edge / inner) if edge > 0 and inner > 0 else 2 * edge - inner
            new = _round(new, all(isinstance(v, int) for v in values))
            if new in axis or (side == "lower" and new < 0):
                continue
            entries.append(
                _entry(
                    variant,
                    EXTEND,
                    done + 1,
                    key,
                    best,
                    [new],
                    f"best {_name(key)}={edge} on the {side} edge; {_name(key)}={inner} "
                    f"worse by {gap:.4g} > max(margin {ext.margin:g}, spread {spread:.4g})",
                )
            )
        if entries:
            return entries
    if ext.refine and not refined:
        for key in ext.keys:
            axis = list(_axis(sweep, variant, key, best))
            i = axis.index(best[key])
            integer = all(isinstance(v, int) for v in axis)
            new = []
            for j in (i - 1, i + 1):
                if 0 <= j < len(axis):
                    a, b = best[key], axis[j]
                    mid = math.sqrt(a * b) if a > 0 and b > 0 else (a + b) / 2
                    mid = _round(mid, integer)
                    if mid not in axis and mid not in new:
                        new.append(mid)
            if new:
                entries.append(
                    _entry(
                        variant,
                        REFINE,
                        done + 1,
                        key,
                        best,
                        new,
                        f"refinement at half the step around {_name(key)}={best[key]}",
                    )
                )
    return entries


def _name(key: str) -> str:
    return key.rpartition(".")[2]


def _entry(variant, kind, round_, key, best, values, reason) -> dict[str, Any]:
    settings = [{**best, key: v} for v in values]
    return {
        "variant": variant,
        "kind": kind,
        "round": round_,
        "key": key,
        "values": values,
        "settings": settings,
        "reason": reason,
    }


def _counts(entries, variant) -> tuple[int, bool]:
    mine = [e for e in entries if e["variant"] == variant]
    return len({e["round"] for e in mine if e["kind"] == EXTEND}), any(
        e["kind"] == REFINE for e in mine
    )


def step(sweep: Sweep, workdir: str) -> tuple[Sweep, list[dict[str, Any]]]:
    """Decides the extensions every cell asks for now, from its selection runs, appends them to
    the record (atomically, before any of their runs starts) and returns (the sweep with every
    recorded setting, the new entries)."""
    if sweep.grid_extension is None:
        return sweep, []
    entries = read_record(workdir)
    sweep = with_entries(sweep, entries)
    runs = selection.read_runs(sweep, workdir)
    new = []
    for variant in sweep.variants:
        new += proposals(sweep, runs, variant, *_counts(entries, variant))
    if new:
        write_json(f"{workdir}/{RECORD_FILE}", {"extensions": entries + new})
        sweep = with_entries(sweep, entries + new)
    return sweep, new


def final(sweep: Sweep, workdir: str, runs: Mapping[str, Sequence[RunRecord]]) -> set[str]:
    """The variants whose grid needs nothing more: their choice is the one confirmed."""
    if sweep.grid_extension is None:
        return set(sweep.variants)
    entries = read_record(workdir)
    return {
        v
        for v in sweep.variants
        if selection.cell_means(
            selection.variant_scores(sweep, runs, v, sweep.settings_of(v)), sweep.seeds
        )
        and not proposals(sweep, runs, v, *_counts(entries, v))
    }


def rounds_of(entries: Sequence[Mapping[str, Any]], variant: str) -> tuple[int, bool]:
    """(extension rounds made, refined) of one cell per the record."""
    return _counts(entries, variant)
