"""The hparams of a sweep's runs, as TensorBoard's HParams table and W&B show them.

A run's hparams: its variant, its seed, the level of each trained factor of its cell, its
nuisance setting (sweep/nuisance.py), and every config field some run of the sweep overrides,
with this run's value (the base config's where its variant keeps it), so the table has a value
in every column. The runner writes them to each run directory as hparams.json
(run_dir.HPARAMS_FILE) before the run starts, where the run's tracking reads them
(tracking/run.py); the report rewrites them, and each run's HParams session, for runs that
predate them (`--report_only`, also from a committed runs.csv). The seeds of a variant share a
session group, named as their W&B group ("<sweep>/<variant>"), so TensorBoard averages them.

The sweep's directory holds the HParams experiment (`write_experiment`): the table's columns,
the sweep's declared metrics first (TensorBoard ticks the first five), the selection metric,
the other metrics its runs logged, then the model diagnostics.
"""

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ml_collections.config_flags import config_path

from transformer_jax.run_dir import HPARAMS_FILE, write_json
from transformer_jax.sweep.nuisance import split_run_variant
from transformer_jax.sweep.spec import Sweep
from transformer_jax.sweep_dir import RunRecord, read_curve_tags
from transformer_jax.tracking import hparams as tracking_hparams
from transformer_jax.tracking.run import run_names


def base_values(
    sweep: Sweep, config_spec: str, keys: set[str], cwd: str | None = None
) -> dict[str, Any]:
    """The base config's value of each of `keys` (dotted), its file found from the current
    directory or else from `cwd` (the sweep's launch directory); {} when it cannot be loaded
    (moved or renamed since the sweep ran). A key it lacks is left out."""
    # Here, not at the top: defaults imports the datasets and the model configs (JAX, flax,
    # grain, TFDS; seconds of start-up), which the sweep command needs only for this.
    from transformer_jax import defaults

    path, _, arg = config_spec.partition(":")
    if not os.path.isfile(path) and cwd is not None:
        path = os.path.join(cwd, path)
    try:
        config = defaults.from_file(path, arg or None)
    except (OSError, ImportError, SyntaxError, KeyError, ValueError, TypeError):
        return {}
    values = {}
    for key in keys:
        with contextlib.suppress(KeyError, AttributeError, IndexError):
            values[key] = config_path.get_value(key, config)
    return values


def variant_hparams(
    sweep: Sweep, config_spec: str, cwd: str | None = None
) -> dict[str, dict[str, Any]]:
    """Run variant (sweep.run_variants: with nuisance, "<variant>/<setting>"; then the
    confirmation ones, "<variant>/confirm/<setting>") -> its hparams (all but the seed), in
    sweep order. With nuisance, "setting" names the run's setting and the nuisance keys are
    among the overridden fields; a confirmation run has the same hparams, its seed differs."""
    run_variants = {**sweep.run_variants, **sweep.confirm_run_variants}
    keys = {key for overrides in run_variants.values() for key in overrides}
    base = base_values(sweep, config_spec, keys, cwd)
    out = {}
    for run_variant, overrides in run_variants.items():
        variant, setting = split_run_variant(run_variant)
        values: dict[str, Any] = {"variant": variant}
        if setting:
            values["setting"] = setting
        cell = sweep.cell_of(variant)
        if cell is not None:
            values.update(
                {f.name: level for f, level in zip(sweep.trained_factors, cell, strict=True)}
            )
        fields = {key: base[key] for key in sorted(keys) if key in base}
        values.update({**fields, **overrides})
        out[run_variant] = values
    return out


def run_hparams_json(sweep_name: str, hparams: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """hparams.json of the run of `seed` of a variant with `hparams` (`variant_hparams`)."""
    return {"sweep": sweep_name, "hparams": {**hparams, "seed": seed}}


def sweep_name(workdir: str) -> str:
    """A sweep's name: its directory's (results/attention_scale -> attention_scale)."""
    return os.path.basename(os.path.normpath(os.path.abspath(workdir)))


def write_sessions(
    workdir: str,
    sweep: Sweep,
    config_spec: str,
    records: Sequence[RunRecord],
    cwd: str | None = None,
) -> int:
    """Writes hparams.json and the HParams session of every ended run of `records` (finished,
    diverged or failed; read from run directories or a runs.csv) into its run directory,
    created for a run known from a runs.csv alone; returns how many. A session already there
    keeps its start time; runs still training (or never started) are left to the trainer."""
    by_variant = variant_hparams(sweep, config_spec, cwd)
    name = sweep_name(workdir)
    written = 0
    for record in records:
        if record.status not in ("finished", "diverged", "failed"):
            continue
        content = run_hparams_json(name, by_variant[record.variant], record.seed)
        os.makedirs(record.path, exist_ok=True)
        write_json(os.path.join(record.path, HPARAMS_FILE), content)
        previous = tracking_hparams.read_session_start(record.path)
        tracking_hparams.write_session(
            record.path,
            content["hparams"],
            start_time=previous.start_time_secs if previous is not None else None,
            status=record.status,
            step=record.step or 0,
            metrics=tracking_hparams.flat_metrics(record.metrics),
            group=run_names(record.path, content)[1],
        )
        written += 1
    write_experiment(workdir, sweep, config_spec, records, cwd, by_variant)
    return written


def holds_only_sessions(run_path: str) -> bool:
    """Whether a run directory holds nothing but its hparams.json and HParams session (or does
    not exist): no run trained there. `write_sessions` creates such a directory for a run known
    from a runs.csv alone (a results/ folder committed before records); the runner writes
    hparams.json before a run starts."""
    try:
        names = os.listdir(run_path)
    except FileNotFoundError:
        return True
    sessions = {os.path.basename(p) for p in tracking_hparams.session_files(run_path)}
    return all(name == HPARAMS_FILE or name in sessions for name in names)


def write_experiment(
    workdir: str,
    sweep: Sweep,
    config_spec: str,
    records: Sequence[RunRecord] = (),
    cwd: str | None = None,
    by_variant: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """Writes the sweep's HParams experiment into `workdir`: every hparam of its run variants
    (`variant_hparams`, or `by_variant`) and seeds; the metrics `sweep.recorded_metrics` first,
    then every other one `records` hold (in summary.json or logged to metrics.jsonl) in name
    order, the diagnostics last. Before any run has ended (the runner, at launch) the table
    has the declared metrics alone. Returns the file."""
    if by_variant is None:
        by_variant = variant_hparams(sweep, config_spec, cwd)
    names = dict.fromkeys(name for values in by_variant.values() for name in values)
    hparams: dict[str, list[Any]] = {name: [] for name in names}
    for values in by_variant.values():
        for name in names:
            if name in values:
                hparams[name].append(values[name])
    hparams["seed"] = sorted({*sweep.seeds, *sweep.confirm_seeds})
    found = set()
    for record in records:
        found.update(tracking_hparams.flat_metrics(record.metrics))
        found.update(read_curve_tags(record.path))
    declared = list(sweep.recorded_metrics)
    others = sorted(found - set(declared), key=lambda t: (tracking_hparams.is_diagnostic(t), t))
    return tracking_hparams.write_experiment(workdir, hparams, declared + others)
