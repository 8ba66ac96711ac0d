r"""Running a sweep: every (variant, seed), or the seeds of a variant together, as one trainer
subprocess.

Holds plan (the runs and their trainer commands), launches (the runs grouped by variant),
check_commands (a run directory belongs to this sweep), locked_sweep (what every launcher does
first: plan, check, lock the workdir, record the launch in sweep.json) and run_sweep (launch and
resume).

Each run gets WORKDIR/<variant>/seed_<seed>/ (with nuisance factors, sweep/nuisance.py,
WORKDIR/<variant>/<setting>/seed_<seed>/, each setting its own seed group) and is launched as

    python -m transformer_jax.main --config=<config>[:arg] --workdir=<run dir> \
        --config.seed=<seed> --config.<key>=<value> ...

with the exact command in command.txt and its output in run.log. By default (`seed_groups`) the
pending seeds of one variant instead train in one process as a seed group,

    python -m transformer_jax.main ... --workdir=WORKDIR/<variant> --seeds=0,1,2 ...

(transformer_jax/train/seed_group.py), which writes the same run directories; each seed's
command.txt records the group's command and ends with its own, which resumes it alone and is
what check_commands compares, and the group's output goes to every seed's run.log, each line
naming its run. With nuisance factors, the settings of a cell that differ only in optimizer
scalars train together too, as one run group in WORKDIR/<variant> (`main --runs=<JSON:
setting/seed_<s> -> its seed and scalars>`; `launches`).

With confirm_seeds (sweep/nuisance.py) a second stage follows: as soon as a variant's
selection is complete, its chosen setting trains on the confirmation seeds in
WORKDIR/<variant>/confirm/<setting>/seed_<seed>/ (sweep/selection.py). Before anything starts,
a tree with uncommitted changes to the code is refused unless allow_dirty, and every launched
run records its code version in code.json (sweep/code_version.py).

Rerunning the same sweep resumes: finished and diverged runs (deterministic) are skipped,
interrupted runs are relaunched (the trainer resumes from its checkpoints) and failed runs are
retried; a group is relaunched whole, its ended runs held in their lanes (`launches`), so it
is the program it was. A
failing run writes failure.json and the sweep carries on. The command line
(`python -m transformer_jax.sweep`) then writes the report (transformer_jax/report/report.py),
which reads only the sweep directory (transformer_jax/sweep_dir.py).
"""

import collections
import contextlib
import dataclasses
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from absl import logging

from transformer_jax import environment, sweep_dir, sweep_record
from transformer_jax.commands import check_workdir
from transformer_jax.run_dir import COMMAND_FILE, LOG_FILE, git_commit
from transformer_jax.sweep import (
    code_version,
    grid_edges,
    launcher,
    progress,
    selection,
    sequential,
)
from transformer_jax.sweep import hparams as sweep_hparams
from transformer_jax.sweep.launcher import RunSpec
from transformer_jax.sweep.nuisance import confirm_run_variant, is_confirm, split_run_variant
from transformer_jax.sweep.spec import (
    Sweep,
    check_overrides,
    format_override,
    with_nuisance_default,
)
from transformer_jax.train.group_fields import GROUP_KEYS

DEFAULT_MAIN = "transformer_jax.main"
QUICK_ARG = "quick"
COMPILE_CACHE_DIR = ".compile_cache"


def compile_cache_env(workdir: str) -> dict[str, str]:
    """Environment variables giving the runs of a sweep one persistent compilation cache,
    WORKDIR/.compile_cache: a resumed or retried run, the seeds of a variant trained one by one
    (early stopping) and a rerun of the sweep load their compiled programs instead of compiling
    them again (programs compiling in under a second included: on CPU those are most of them).
    A JAX_COMPILATION_CACHE_DIR already set, or a config's train.compilation_cache_dir, wins."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return {}
    return {
        "JAX_COMPILATION_CACHE_DIR": os.path.abspath(os.path.join(workdir, COMPILE_CACHE_DIR)),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


def build_argv(
    sweep: Sweep,
    variant: str,
    seed: int | Sequence[int],
    path: str,
    config_spec: str,
    main_module: str = DEFAULT_MAIN,
    python: str = sys.executable,
) -> tuple[str, ...]:
    """The trainer command of one run (ml_collections config flags for seed and overrides), or
    with several seeds, of their seed group in `path`, the variant's directory. variant is a run
    variant (sweep.run_variants: with nuisance, "<variant>/<setting>"; or a confirmation one,
    "<variant>/confirm/<setting>")."""
    overrides = [
        f"--config.{k}={format_override(v)}" for k, v in sweep.overrides_of(variant).items()
    ]
    if isinstance(seed, int):
        seeds = f"--config.seed={seed}"
    else:
        seeds = f"--seeds={','.join(str(s) for s in seed)}"
    return _trainer_argv(python, main_module, config_spec, path, seeds, *overrides)


def _trainer_argv(python, main_module, config_spec, path, *args) -> tuple[str, ...]:
    return (python, "-m", main_module, f"--config={config_spec}", f"--workdir={path}", *args)


def build_group_argv(
    sweep: Sweep,
    runs: Sequence[RunSpec],
    config_spec: str,
    main_module: str = DEFAULT_MAIN,
    python: str = sys.executable,
) -> tuple[str, ...]:
    """The trainer command of a run group (`main --runs`): the runs of one cell at several
    nuisance settings, in the cell's directory. The overrides the runs share are flags; those
    they differ in (optimizer scalars only: `_group_key`) and each run's seed go in --runs."""
    overrides = [sweep.overrides_of(r.variant) for r in runs]
    shared = {k: v for k, v in overrides[0].items() if all(k in o and o[k] == v for o in overrides)}
    path = os.path.dirname(os.path.dirname(runs[0].path))  # WORKDIR/<variant>
    members = {
        os.path.relpath(r.path, path): {
            "seed": r.seed,
            **{k: v for k, v in o.items() if k not in shared},
        }
        for r, o in zip(runs, overrides, strict=True)
    }
    runs_flag = f"--runs={json.dumps(members, separators=(',', ':'))}"
    flags = (f"--config.{k}={format_override(v)}" for k, v in shared.items())
    return _trainer_argv(python, main_module, config_spec, path, runs_flag, *flags)


def _group_key(sweep: Sweep, run_variant: str) -> tuple:
    """Runs with the same key train as one group: a run variant's seeds, and with nuisance the
    settings of one cell whose values differ only in the optimizer scalars one program takes per
    run (transformer_jax/train/group_fields.py). Confirmation runs group by run variant."""
    if not sweep.nuisance or is_confirm(run_variant):
        return (run_variant,)
    variant, setting = split_run_variant(run_variant)
    values = sweep.settings[setting]
    apart = tuple((k, v) for k, v in values.items() if k not in GROUP_KEYS)
    # Clipping or not is a choice of program: a grid over the norm with 0 makes two groups.
    clips = values.get("train.grad_clip_norm", 1.0) > 0
    return (variant, apart, clips)


def launches(
    sweep: Sweep,
    workdir: str,
    todo: Sequence[RunSpec],
    config_spec: str,
    main_module: str,
    seed_groups: bool,
    members: Sequence[RunSpec] | None = None,
) -> list[RunSpec | launcher.GroupSpec]:
    """What to start for the runs `todo`: with `seed_groups`, the runs of each variant as one
    seed group, and with nuisance the runs of each cell (its settings and seeds) as one run
    group where the settings differ only in optimizer scalars (`_group_key`): one process, one
    vmapped program; a group of one run runs alone. Otherwise every run by itself.

    A group is formed from `members` (default `todo`): the stage's selected runs, those already
    done included. A resumed group is then the program it was: the runs that ended (finished,
    diverged) are in its command and hold their lanes, untouched (train/loop.py), so the others
    train as in the uninterrupted group, bit for bit; a group of only the runs left would be a
    smaller program, whose batched matmuls round otherwise. A group none of whose runs is in
    `todo` is not started."""
    if not seed_groups:
        return list(todo)
    pending = set(todo)
    by_key: dict[tuple, list[RunSpec]] = {}
    for spec in todo if members is None else members:
        by_key.setdefault(_group_key(sweep, spec.variant), []).append(spec)
    units: list[RunSpec | launcher.GroupSpec] = []
    for runs in by_key.values():
        trained = tuple(r for r in runs if r in pending)
        held = tuple(r for r in runs if r not in pending)
        if not trained:
            continue
        if len(runs) == 1:
            units.extend(runs)
        elif len({r.variant for r in runs}) == 1:
            variant = runs[0].variant
            path = os.path.join(workdir, variant)
            seeds = [r.seed for r in runs]
            argv = build_argv(sweep, variant, seeds, path, config_spec, main_module)
            units.append(launcher.GroupSpec(trained, argv, held))
        else:
            argv = build_group_argv(sweep, runs, config_spec, main_module)
            units.append(launcher.GroupSpec(trained, argv, held))
    return units


def plan(
    sweep: Sweep,
    workdir: str,
    config_spec: str,
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    main_module: str = DEFAULT_MAIN,
) -> list[RunSpec]:
    """The selected runs of the selection stage, variant-major in sweep order; selections must be
    part of the sweep (--seeds may also name confirmation seeds: `plan_confirm`). With nuisance,
    every setting of each selected variant (run variants "<variant>/<setting>")."""
    variants, seeds = _selected(sweep, variants, seeds)
    return _specs(sweep, workdir, config_spec, main_module, sweep.run_variants, variants, seeds)


def plan_confirm(
    sweep: Sweep,
    workdir: str,
    config_spec: str,
    settings: Mapping[str, str],
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    main_module: str = DEFAULT_MAIN,
) -> list[RunSpec]:
    """The selected confirmation runs: each variant of `settings` (variant -> chosen setting,
    selection.confirm_settings) at its setting, on the selected confirmation seeds."""
    variants, seeds = _selected(sweep, variants, seeds)
    run_variants = [confirm_run_variant(v, settings[v]) for v in sweep.variants if v in settings]
    return _specs(sweep, workdir, config_spec, main_module, run_variants, variants, seeds)


def _selected(
    sweep: Sweep, variants: Sequence[str] | None, seeds: Sequence[int] | None
) -> tuple[list[str], list[int]]:
    """The --variants and --seeds selections (all when empty), each checked against the sweep."""
    variants = list(sweep.variants) if not variants else list(variants)
    every_seed = (*sweep.seeds, *sweep.confirm_seeds)
    seeds = list(every_seed) if not seeds else list(seeds)
    for v in variants:
        if v not in sweep.variants:
            raise ValueError(f"--variants contains {v!r}; valid: {', '.join(sweep.variants)}")
    for s in seeds:
        if s not in every_seed:
            raise ValueError(f"--seeds contains {s}; valid: {', '.join(map(str, every_seed))}")
    return variants, seeds


def _specs(sweep, workdir, config_spec, main_module, run_variants, variants, seeds):
    hparams = sweep_hparams.variant_hparams(sweep, config_spec)
    name = sweep_hparams.sweep_name(workdir)
    stage_seeds = {v: sweep.confirm_seeds if is_confirm(v) else sweep.seeds for v in run_variants}
    return [
        RunSpec(
            v,
            s,
            sweep_dir.run_dir(workdir, v, s),
            build_argv(sweep, v, s, sweep_dir.run_dir(workdir, v, s), config_spec, main_module),
            sweep_hparams.run_hparams_json(name, hparams[v], s),
        )
        for v in run_variants
        if split_run_variant(v)[0] in variants
        for s in stage_seeds[v]
        if s in seeds
    ]


def _trainer_args(command_line: str) -> list[str]:
    """Arguments after the interpreter in a command.txt line (drops `cd X &&` and VAR=value),
    with a relative --workdir made absolute (a record written relative to the repository, read
    from there)."""
    tokens = shlex.split(command_line)
    if "&&" in tokens:
        tokens = tokens[tokens.index("&&") + 1 :]
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        tokens = tokens[1:]
    return [_absolute_workdir(token) for token in tokens[1:]]


def _absolute_workdir(arg: str) -> str:
    flag, _, value = arg.partition("=")
    return f"{flag}={os.path.abspath(value)}" if flag == "--workdir" else arg


def _read_command(path: str) -> str | None:
    try:
        with open(os.path.join(path, COMMAND_FILE)) as f:
            lines = [line for line in f.read().splitlines() if line and not line.startswith("#")]
    except FileNotFoundError:
        return None
    return lines[-1] if lines else None


def check_commands(specs: Sequence[RunSpec]) -> None:
    """Raises ValueError if a run directory was made by a different command.

    Mixing results of another config, quick setting or override into a table would be silent
    corruption; a changed sweep needs a fresh workdir. The interpreter path is not compared,
    nor the run's --workdir: a sweep directory moved elsewhere holds the same runs.
    """
    for spec in specs:
        previous = _read_command(spec.path)
        wanted = _without_workdir(spec.argv[1:])
        if previous is not None and _without_workdir(_trainer_args(previous)) != wanted:
            raise ValueError(
                f"run directory {spec.path} was made by a different command:\n  {previous}\n"
                f"this sweep would run:\n  {shlex.join(spec.argv)}\n"
                "use a new --workdir for a changed sweep (the runs here stay as they are)"
            )


def _without_workdir(args: list[str]) -> list[str]:
    return [arg for arg in args if not arg.startswith("--workdir=")]


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def plan_checked(
    sweep: Sweep,
    workdir: str,
    variants: Sequence[str] | None,
    seeds: Sequence[int] | None,
    quick: bool,
    main_module: str,
) -> tuple[str, str, list[RunSpec]]:
    """(absolute workdir, config spec, run specs) of the selected runs, every override and
    command checked; nothing is written. Shared by every launcher."""
    # Config arguments are comma-separated; every config understands "quick".
    config_arg = ",".join(a for a in (sweep.config_arg, QUICK_ARG if quick else "") if a)
    config_spec = f"{sweep.config}:{config_arg}" if config_arg else sweep.config
    check_overrides(sweep, config_arg)
    with_nuisance_default(sweep)  # The default must be in the grid.
    check_workdir(workdir)
    # Absolute run directories: the trainer's checkpointer needs them (command.txt records them
    # relative to the repository when launched from it: commands.recorded_shell_command).
    workdir = os.path.abspath(workdir)
    specs = plan(sweep, workdir, config_spec, variants, seeds, main_module)
    specs += confirm_specs(sweep, workdir, config_spec, variants, seeds, main_module)
    if not specs:
        # Only confirmation seeds selected, before any variant's selection is complete.
        raise ValueError(
            f"--seeds={','.join(map(str, seeds or ()))} selects only confirmation seeds, and no "
            "selected variant's selection runs are complete yet, so there is nothing to run; "
            f"valid: first the selection seeds ({', '.join(map(str, sweep.seeds))}), or no "
            "--seeds"
        )
    check_commands(specs)
    return workdir, config_spec, specs


def confirm_specs(
    sweep: Sweep,
    workdir: str,
    config_spec: str,
    variants: Sequence[str] | None,
    seeds: Sequence[int] | None,
    main_module: str,
) -> list[RunSpec]:
    """The selected confirmation runs of the variants whose selection is complete now, read from
    the run directories; a ValueError when confirmation runs exist at a setting the selection no
    longer chooses (selection.check_confirmations). [] without confirm_seeds."""
    if not sweep.confirm_seeds:
        return []
    runs = selection.read_runs(sweep, workdir)
    settings = selection.check_confirmations(sweep, runs)
    # A grid still being extended has no final choice yet (sweep/grid_edges.py).
    final = grid_edges.final(sweep, workdir, runs)
    settings = {v: s for v, s in settings.items() if v in final}
    specs = plan_confirm(sweep, workdir, config_spec, settings, variants, seeds, main_module)
    if sweep.confirm_rounds:
        # Seeds until decided: the rounds each cell's undecided comparisons still need.
        values = sequential.confirm_values(sweep, runs, settings)
        wanted = sequential.seeds_wanted(sweep, values, list(settings))
        specs = [s for s in specs if s.seed in wanted.get(split_run_variant(s.variant)[0], ())]
    return specs


def resolved_sweep(sweep: Sweep) -> dict[str, Any]:
    """The sweep as sweep.json records it, with the base config's nuisance values: the untuned
    setting the report compares with."""
    return with_nuisance_default(sweep).to_dict()


@contextlib.contextmanager
def locked_sweep(
    sweep: Sweep,
    sweep_file: str,
    workdir: str,
    *,
    variants: Sequence[str] | None,
    seeds: Sequence[int] | None,
    quick: bool,
    main_module: str,
    command: str,
    machine: Mapping[str, Any] | None,
    allow_dirty: bool = False,
    replace: bool = False,
    **invocation: Any,
) -> Iterator[tuple[str, str, list[RunSpec], dict[str, Any]]]:
    """What every launcher does before starting runs: refuses a tree with uncommitted changes
    to the code unless `allow_dirty` (code_version.checked), plans and checks the selected runs
    (`plan_checked`), nothing written if either raises; then takes the workdir lock and appends
    this launch to sweep.json (the command, date, commit, code version, `machine` (None: this
    host's), the selected variants and seeds, and the launcher's own `invocation` fields).
    Yields (absolute workdir, config spec, run specs, code version) with the lock held, each
    spec carrying the code version its code.json records. A workdir holding another sweep is
    refused unless `replace` (sweep_dir.update_sweep_json)."""
    version = code_version.checked(allow_dirty)
    code = version.to_json()
    workdir, config_spec, specs = plan_checked(sweep, workdir, variants, seeds, quick, main_module)
    specs = [dataclasses.replace(s, code=code) for s in specs]
    os.makedirs(workdir, exist_ok=True)
    with launcher.WorkdirLock(workdir):
        sweep_dir.update_sweep_json(
            workdir,
            resolved_sweep(sweep),
            sweep_file,
            config_spec,
            quick,
            main_module,
            {
                # The workdir and data as placeholders: the record is committed (sweep_record).
                "command": sweep_record.scrub(command, sweep_record.places(workdir)),
                "date": launcher.now(),
                "git_commit": git_commit(),
                "code": code,
                "allow_dirty": allow_dirty,
                "machine": dict(machine) if machine is not None else environment.machine_info(),
                "variants": sorted({s.variant for s in specs}),
                "seeds": sorted({s.seed for s in specs}),
                **invocation,
            },
            replace=replace,
        )
        code_version.say_unchecked(version)  # the launch is accepted: no error line follows
        # A sweep resumed from a record (a copy of a committed results/ folder): its recorded
        # runs come back as run directories, so the runs below skip them as done.
        sweep_record.unpack_missing(workdir, sweep_record.read_record(workdir))
        # TensorBoard opens on the sweep's metrics while it trains (the report adds the rest).
        sweep_hparams.write_experiment(workdir, sweep, config_spec)
        yield workdir, config_spec, specs, code


def run_sweep(
    sweep: Sweep,
    sweep_file: str,
    workdir: str,
    *,
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    quick: bool = False,
    parallel: int = 1,
    seed_groups: bool = True,
    compile_cache: bool = True,
    main_module: str = DEFAULT_MAIN,
    command: str = "",
    machine: Mapping[str, Any] | None = None,
    allow_dirty: bool = False,
    replace: bool = False,
) -> dict[str, int]:
    """Runs the selected runs not yet done (the report is written by the caller:
    transformer_jax.report.report.write_report).

    Args:
      sweep, sweep_file: the loaded sweep and the path it came from.
      workdir: sweep directory (created); runs go to WORKDIR/<variant>/seed_<seed> (with
        nuisance, WORKDIR/<variant>/<setting>/seed_<seed>).
      variants, seeds: subsets to run (default: all).
      quick: pass get_config the argument "quick" (every run shrunk).
      parallel: number of runs (or seed groups) trained at once, each pinned to its own CPUs.
      seed_groups: train the pending seeds of each variant as one seed group (one process, one
        vmapped program: transformer_jax/train/seed_group.py); False runs every seed alone.
      compile_cache: the runs share a persistent compilation cache, WORKDIR/.compile_cache
        (`compile_cache_env`); False compiles every program in every process.
      main_module: the trainer module run with `python -m`.
      command: the sweep command line, recorded in sweep.json and the report.
      machine: environment.machine_info() of this host (computed when None).
      allow_dirty: launch even with uncommitted changes to transformer_jax/, configs/ or
        experiments/ (sweep/code_version.py); each run records the diff's sha256.
      replace: run into a workdir whose sweep.json records another sweep, its records kept in
        WORKDIR/replaced/<n>/ (refused otherwise: sweep_dir.update_sweep_json).

    Returns:
      Counts of the selected runs by final status (finished, diverged, failed, incomplete).
    """
    if parallel < 1:
        raise ValueError(f"parallel = {parallel}: must be >= 1")
    sweep = grid_edges.applied(sweep, workdir)  # the settings earlier launches added
    with locked_sweep(
        sweep,
        sweep_file,
        workdir,
        variants=variants,
        seeds=seeds,
        quick=quick,
        main_module=main_module,
        command=command,
        machine=machine,
        allow_dirty=allow_dirty,
        replace=replace,
        parallel=parallel,
        seed_groups=seed_groups,
        compile_cache=compile_cache,
    ) as (workdir, config_spec, specs, code):
        env = compile_cache_env(workdir) if compile_cache else {}
        outcomes: dict[str, str] = {}
        stage, planned = specs, list(specs)
        # The selection's runs (and the confirmations already choosable), then the confirmation
        # runs of the variants whose selection those runs completed.
        while stage:
            before = {s: sweep_dir.read_run(workdir, s.variant, s.seed).status for s in stage}
            todo = [s for s in stage if before[s] not in sweep_dir.DONE_STATUSES]
            total, done = len(stage), len(stage) - len(todo)
            kinds = collections.Counter(before[s] for s in todo)
            logging.info(
                "sweep %s: %d runs, %d already done (skipped), %d new, %d to resume, %d to retry",
                sweep_file,
                total,
                done,
                kinds["missing"],
                kinds["incomplete"],
                kinds["failed"],
            )
            units = launches(sweep, workdir, todo, config_spec, main_module, seed_groups, stage)
            outcomes |= _run_all(
                workdir, units, before, parallel, total, done, sweep.recorded_metrics, env
            )
            sweep, extended = grid_edges.step(sweep, workdir)
            for entry in extended:
                logging.info("grid of %s: %s", entry["variant"], entry["reason"])
            more = (
                plan(sweep, workdir, config_spec, variants, seeds, main_module) if extended else []
            )
            more += confirm_specs(sweep, workdir, config_spec, variants, seeds, main_module)
            names = {s.name for s in planned}
            stage = [dataclasses.replace(s, code=code) for s in more if s.name not in names]
            check_commands(stage)
            planned += stage
            if stage:
                logging.info("%d more runs: grid extensions or confirmation rounds", len(stage))

    counts = collections.Counter(
        outcomes.get(s.name) or sweep_dir.read_run(workdir, s.variant, s.seed).status
        for s in planned
    )
    logging.info("sweep done: %s", dict(counts))
    return dict(counts)


def _run_all(
    workdir: str,
    todo: Sequence[RunSpec | launcher.GroupSpec],
    before: Mapping[RunSpec, str],
    parallel: int,
    total: int,
    done: int,
    metrics: Sequence[str],
    env: Mapping[str, str],
) -> dict[str, str]:
    """Schedules todo (runs and seed groups) over `parallel` slots, each launched with the extra
    environment variables `env`, logging progress; returns run name -> status."""
    slots = launcher.cpu_slots(parallel)
    gpus = launcher.gpu_slots(parallel)  # Several GPUs: each slot trains on its own.
    free = list(range(parallel))
    pending = collections.deque(todo)
    running: dict[int, launcher.Launch] = {}
    outcomes: dict[str, str] = {}
    start, finished = time.monotonic(), []  # wall times of the launches done (ETA's unit)
    display = progress.Display()
    cwd = os.getcwd()
    # SIGTERM (kill, a job scheduler) must stop the children too, like Ctrl-C: otherwise they
    # keep training as orphans while the next launch starts the same runs again.
    previous_handler = None
    if threading.current_thread() is threading.main_thread():
        previous_handler = signal.signal(signal.SIGTERM, _interrupt)
    try:
        while pending or running:
            while pending and free:
                slot, spec = free.pop(0), pending.popleft()
                why = {"incomplete": " (resuming)", "failed": " (retrying after failure)"}
                whys = sorted({why.get(before[r], "") for r in spec.runs} - {""})
                display.clear()
                logging.info("start %s%s", spec.name, "".join(whys))
                running[slot] = launcher.Launch(spec, slots[slot], cwd, env, gpus[slot])
            time.sleep(0.1)
            for slot, launch in list(running.items()):
                if launch.proc.poll() is None:
                    continue
                duration = launch.close()
                del running[slot]
                free.append(slot)
                finished.append(duration)
                display.clear()
                for run in launch.runs:
                    record = launcher.record_outcome(workdir, launch, duration, run)
                    outcomes[run.name] = record.status
                    done += 1
                    elapsed = time.monotonic() - start
                    eta = _eta(finished, running.values(), len(pending), parallel)
                    _log_outcome(run, record, f"[{done}/{total}]", duration, elapsed, eta, metrics)
            lines = [progress.progress_line(r.spec.name, r.runs[0].path) for r in running.values()]
            remaining = _eta(finished, running.values(), len(pending), parallel)
            if lines and remaining is not None:
                lines[-1] += f" | sweep ETA {_fmt_duration(remaining)}"
            display.show(lines)
    finally:
        # Interrupted (Ctrl-C) or crashed: stop children so no orphan keeps training; their
        # directories stay "incomplete" and the next launch resumes them.
        if running:
            logging.warning(
                "stopping %d running run(s); they resume on the next launch", len(running)
            )
        for launch in running.values():
            launch.terminate()
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    return outcomes


def _eta(finished, running, pending: int, parallel: int) -> float | None:
    """progress.eta of the launches done, running (their elapsed times) and pending."""
    now = time.monotonic()
    return progress.eta(finished, [now - r.start for r in running], pending, parallel)


def _log_outcome(run, record, counter, duration, elapsed, eta, metrics) -> None:
    values = ", ".join(
        f"{m}={record.metric(m):.4g}" for m in metrics if record.metric(m) is not None
    )
    logging.info(
        "%s %s %s in %s%s | sweep elapsed %s, ETA %s",
        counter,
        run.name,
        record.status.upper() if record.status != "finished" else "finished",
        _fmt_duration(duration),
        f" ({values})" if values else "",
        _fmt_duration(elapsed),
        "?" if eta is None else _fmt_duration(eta),
    )
    if record.status == "failed":
        logging.warning(
            "%s failed: %s (see %s)",
            run.name,
            (record.failure or {}).get("error"),
            os.path.join(run.path, LOG_FILE),
        )


def _interrupt(signum, frame):
    del frame
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")
