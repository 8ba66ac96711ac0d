"""Runs a sweep file into a workdir, or only rebuilds its report.

    python -m transformer_jax.sweep --sweep=experiments/attention_scale.py --workdir=runs/scale
    python -m transformer_jax.sweep --workdir=runs/scale --report_only
    python -m transformer_jax.sweep --workdir=runs/scale --status
    python -m transformer_jax.sweep --workdir=runs/scale --plan      # seeds each comparison needs
    python -m transformer_jax.sweep --sweep=... --workdir=DIR --launcher=slurm --slurm_gpus=1
    python -m transformer_jax.sweep --workdir=COPY_OF_RESULTS_FOLDER --tensorboard

A committed results folder's report is rebuilt from its record (runs.jsonl) or its runs.csv:

    python -m transformer_jax.sweep --workdir=results/attention_scale --report_only

Rerunning the same command resumes the sweep. Exit status: 0 done; 1 a selected run failed or
stopped before finishing (a submission exits 0 once its jobs are queued); 2 a bad sweep file,
flag or workdir (one error line); 130 interrupted."""

import os
import sys
from collections.abc import Sequence

from absl import app, flags

from transformer_jax import sweep_record
from transformer_jax.commands import one_line_errors, parse_flags, recorded_command
from transformer_jax.report import plan
from transformer_jax.report.report import write_report
from transformer_jax.sweep import grid_edges, slurm
from transformer_jax.sweep import hparams as sweep_hparams
from transformer_jax.sweep.runner import DEFAULT_MAIN, resolved_sweep, run_sweep
from transformer_jax.sweep.spec import Sweep, load_sweep
from transformer_jax.sweep_dir import (
    SWEEP_FILE,
    read_run,
    read_sweep_json,
    replaced_line,
    restored_on_refusal,
    run_dir,
    update_sweep_json,
)

# The module docstring is the command's --help. This module writes the report
# (transformer_jax/report), which reads the sweep package's definitions, so it sits above both
# packages; `python -m transformer_jax.sweep` runs it (transformer_jax/sweep/__main__.py hands
# the process over). Resuming: sweep/runner.py, and sweep/slurm.py for the job launchers.


def define_flags() -> None:
    """Command-line flags; defined only when run as a program, so importing this module (tests,
    the trainer's own flags in one process) defines nothing."""
    flags.DEFINE_string("sweep", None, "Sweep file (Python) defining get_sweep().")
    flags.DEFINE_string("workdir", None, "Sweep directory: runs, sweep.json, report.")
    flags.DEFINE_list("variants", [], "Only run these variants (default: all).")
    flags.DEFINE_list("seeds", [], "Only run these seeds (default: all of the sweep's).")
    flags.DEFINE_bool("quick", False, "Shrink every run: --config=<config>:quick.")
    flags.DEFINE_integer(
        "parallel",
        1,
        "Runs (or seed groups) trained at once, each pinned to its own CPUs and, with several "
        "GPUs, given its own GPUs (CUDA_VISIBLE_DEVICES).",
    )
    flags.DEFINE_bool(
        "seed_groups",
        True,
        "Train the pending seeds of each variant (with nuisance factors over optimizer "
        "scalars, the settings and seeds of each cell) as one process and one vmapped program "
        "(one job with a job launcher); --seed_groups=false trains every run in a process of "
        "its own.",
    )
    flags.DEFINE_bool(
        "compile_cache",
        True,
        "The runs share a persistent compilation cache in WORKDIR/.compile_cache (with a job "
        "launcher, on the shared filesystem); --compile_cache=false compiles every program in "
        "every run.",
    )
    flags.DEFINE_bool(
        "report_only",
        False,
        "Only regenerate the report from WORKDIR (with --sweep: first replace the stored "
        "definition, e.g. to add a metric).",
    )
    flags.DEFINE_list(
        "runs_csv",
        [],
        "With --report_only: read the runs from this runs.csv (a report's, e.g. a committed "
        "results/<sweep>/runs.csv) instead of the run directories, which need not exist; "
        "several, comma-separated, are merged (a run missing from one is taken from another).",
    )
    flags.DEFINE_bool(
        "force",
        False,
        "With --report_only: write the report even when it lists fewer finished runs than the "
        "runs.csv it replaces (refused by default: their run directories are missing and "
        "runs.jsonl does not record them).",
    )
    flags.DEFINE_bool(
        "tensorboard",
        False,
        "Only write the TensorBoard event files (scalars and HParams sessions) of the runs "
        "WORKDIR's runs.jsonl records, unpacking their run directories into WORKDIR (e.g. a "
        "copy of a committed results/ folder), then `tensorboard --logdir WORKDIR`.",
    )
    flags.DEFINE_bool(
        "allow_dirty",
        False,
        "Launch runs even though transformer_jax/, configs/ or experiments/ have uncommitted "
        "changes (refused by default: one code version per sweep); each run records the "
        "diff's sha256 in its code.json.",
    )
    flags.DEFINE_bool(
        "replace",
        False,
        "Run (or, with --report_only --sweep, record) this sweep in a workdir whose sweep.json "
        "records another one (other variants, seeds, grid or config: refused by default); the "
        "old sweep.json and report are kept in WORKDIR/replaced/<n>/.",
    )
    flags.DEFINE_bool(
        "plan",
        False,
        "Only print, for a sweep with confirm_rounds, the seeds each comparison is expected to "
        "need: its design simulated at the paired sd observed in WORKDIR (or --plan_sd; with "
        "--sweep for a workdir not yet started). Writes nothing.",
    )
    flags.DEFINE_float(
        "plan_sd",
        0.0,
        "With --plan: the paired seed-to-seed sd assumed for comparisons with fewer than two "
        "paired confirmation seeds.",
    )
    flags.DEFINE_string("main_module", DEFAULT_MAIN, "Trainer module run with python -m.")
    slurm.define_flags()  # --launcher, --status, --slurm_*


@one_line_errors("sweep")  # a bad sweep file, flag or workdir: one line, exit status 2
def main(argv: Sequence[str]) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt as e:
        print(f"sweep: interrupted ({e}); rerun the same command to resume", file=sys.stderr)
        return 130


def results_section(report_path: str) -> str:
    """The report's results table, for the console at the end of a sweep."""
    with open(report_path) as f:
        text = f.read()
    start = text.find("## Results")
    end = text.find("\n## ", start + 1)
    return f"\n{text[start:end].strip()}\n\nFull report: {report_path}"


def tensorboard_events(workdir: str) -> str:
    """Unpacks the runs WORKDIR's runs.jsonl records and WORKDIR lacks, writes each recorded
    run's scalars and HParams session as TensorBoard event files; returns a line saying so."""
    record = sweep_record.read_record(workdir)
    if not record:
        raise ValueError(
            f"workdir {workdir!r} has no {sweep_record.RECORD_FILE} (or it is empty): nothing to "
            "write events of"
        )
    resolved = read_sweep_json(workdir)
    unpacked = sweep_record.missing_runs(workdir, record)
    sweep_record.unpack_missing(workdir, record)
    scalars = sum(sweep_record.write_events(run_dir(workdir, *key)) for key in unpacked)
    records = [read_run(workdir, *key) for key in record]
    # With grid_extension, the settings grid_extensions.json added, as the report reads them.
    sweep = grid_edges.applied(Sweep.from_dict(resolved), workdir)
    sessions = sweep_hparams.write_sessions(
        workdir, sweep, resolved["config_spec"], records, resolved.get("cwd")
    )
    return (
        f"{len(unpacked)} runs unpacked from {sweep_record.RECORD_FILE} with {scalars} scalars; "
        f"{sessions} HParams sessions: tensorboard --logdir {workdir}"
    )


def report_with_sweep(
    workdir: str, sweep_file: str, runs_csv: list[str] | None, force: bool, replace: bool
) -> str:
    """`--report_only --sweep`: records the sweep file's definition in sweep.json (refused for
    another sweep unless `replace`), then writes the report; returns report.md's path. A report
    refused (a run's damaged record, fewer runs than runs.csv) leaves sweep.json and replaced/
    as they were (sweep_dir.restored_on_refusal): nothing was written, as its error says."""
    stored = read_sweep_json(workdir)
    with restored_on_refusal(workdir) as replaced:
        update_sweep_json(
            workdir,
            resolved_sweep(load_sweep(sweep_file)),
            sweep_file,
            stored["config_spec"],
            stored.get("quick", False),
            stored.get("main_module", DEFAULT_MAIN),
            replace=replace,
            announce=False,
        )
        report = write_report(workdir, runs_csv=runs_csv, force=force)
    for kept in replaced:
        print(replaced_line(os.path.join(workdir, SWEEP_FILE), kept))
    return report


def _main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    f = flags.FLAGS
    workdir = f.workdir
    if not workdir:
        raise ValueError("--workdir is required")
    try:
        seeds = [int(s) for s in f.seeds]
    except ValueError:
        raise ValueError(f"--seeds={','.join(f.seeds)}: must be integers") from None
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:  # --seeds=0,0 for 0,1 would run seed 0 alone, and say nothing
        raise ValueError(
            f"--seeds={','.join(f.seeds)} repeats {', '.join(map(str, repeated))}; valid: each "
            "seed once"
        )
    launcher = slurm.check_launcher(f.launcher, f.parallel, slurm.flag_values(f))
    if f.status:
        print(slurm.format_status(slurm.sweep_status(workdir)))
        return 0
    if f.runs_csv and not f.report_only:
        raise ValueError("--runs_csv only works with --report_only")
    if f.force and not f.report_only:
        raise ValueError("--force only works with --report_only")
    if f.tensorboard:
        print(tensorboard_events(workdir))
        return 0
    if f.plan:
        if f.plan_sd < 0:
            raise ValueError(f"--plan_sd={f.plan_sd}: must be >= 0 (0: observed sds only)")
        print(plan.plan(workdir, f.sweep, f.plan_sd))
        return 0
    if f.report_only:
        if f.sweep:
            print(report_with_sweep(workdir, f.sweep, f.runs_csv or None, f.force, f.replace))
        else:
            print(write_report(workdir, runs_csv=f.runs_csv or None, force=f.force))
        return 0
    if not f.sweep:
        raise ValueError("--sweep is required (unless --report_only or --status)")
    if launcher != slurm.LOCAL:
        states = slurm.submit_sweep(
            load_sweep(f.sweep),
            f.sweep,
            workdir,
            launcher=launcher,
            slurm=slurm.resources(f.sweep, slurm.flag_values(f)),
            variants=f.variants,
            seeds=seeds,
            quick=f.quick,
            main_module=f.main_module,
            command=recorded_command("transformer_jax.sweep", sys.argv[1:]),
            seed_groups=f.seed_groups,
            compile_cache=f.compile_cache,
            allow_dirty=f.allow_dirty,
            replace=f.replace,
        )
        print(slurm.format_status(states))
        print(
            f"\nRerun this command to resubmit what fails or is interrupted (and, once a "
            "variant's selection runs are done, to submit its confirmation runs); "
            f"--workdir={workdir} "
            "--status shows progress, --report_only writes the report."
        )
        return 0
    counts = run_sweep(
        load_sweep(f.sweep),
        f.sweep,
        workdir,
        variants=f.variants,
        seeds=seeds,
        quick=f.quick,
        parallel=f.parallel,
        seed_groups=f.seed_groups,
        compile_cache=f.compile_cache,
        main_module=f.main_module,
        command=recorded_command("transformer_jax.sweep", sys.argv[1:]),
        allow_dirty=f.allow_dirty,
        replace=f.replace,
    )
    report = write_report(workdir)
    print(results_section(report))
    # Failed or unfinished runs leave a non-zero exit so scripts notice; diverged runs are results.
    return 1 if counts.get("failed") or counts.get("incomplete") else 0


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=parse_flags("sweep"))
