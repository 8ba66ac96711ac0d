"""Sweeps on a Slurm cluster: every pending run of a sweep submitted as a job through submitit.

    python -m transformer_jax.sweep --sweep=experiments/x.py --workdir=DIR --launcher=slurm \
        --slurm_partition=gpu --slurm_gpus=1 --slurm_time_min=240
    python -m transformer_jax.sweep --workdir=DIR --status

Holds SlurmResources (what each job asks for), TrainJob (the job: one run, or by default the
seeds of a variant as one seed group, trained as a subprocess exactly as the local runner does
it), submit_sweep and sweep_status.

The sweep directory stays the single source of truth. Submitting writes WORKDIR/<variant>/
seed_<seed>/job.json (launcher, job id, submission time, earlier submissions); submitit keeps its
job pickles and logs in WORKDIR/_submitit/. A run's state combines its run directory with what
the scheduler says about its last job (see run_state); rerunning the submission skips finished
and diverged runs, leaves queued and running jobs alone and resubmits pending, interrupted and
failed runs.

Preemption and time limits: submitit asks Slurm for a warning signal (USR2, signal_delay_s
before the time limit; at preemption too where the cluster sets PreemptParameters=
send_user_signal, else preemption is a SIGTERM the trainer handles itself, and Slurm or the next
submission requeues the run). The job process handles USR2 (TrainJob.checkpoint):
SIGTERM to the trainer, which saves a checkpoint and exits (STOPPED_EXIT_CODE), then submitit
requeues the job and the requeued job resumes the run from that checkpoint. Slurm signals every
process of the job step, so the trainer is started with USR2 blocked: only the job process acts
on it.

Launchers: "slurm" (SlurmExecutor: sbatch, job arrays) and "submitit_local" (submitit's
LocalExecutor: the same job pickles, folders and requeue path, run as processes on this machine;
for trying a sweep's Slurm path without a cluster, and for the tests). "local" is the subprocess
runner of runner.py.
"""

import collections
import contextlib
import dataclasses
import importlib.util
import math
import os
import platform
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import submitit
from absl import logging
from submitit.slurm.slurm import SlurmInfoWatcher

from transformer_jax import run_dir, sweep_dir
from transformer_jax.run_dir import JOB_FILE, lock_run, read_json, write_json
from transformer_jax.sweep import launcher as launcher_lib
from transformer_jax.sweep import nuisance, runner, selection
from transformer_jax.sweep.launcher import GroupSpec, RunSpec
from transformer_jax.sweep.spec import Sweep

JOBS_DIR = "_submitit"  # in the sweep directory: submitit's pickles and job logs
LOCAL = "local"  # the subprocess runner (runner.py)
_SLURM_PROBE = "srun"  # submitit's own test of being on a Slurm cluster

# What sacct's State says about a job (its first word: "CANCELLED by 123"), as a run state.
# Anything else (COMPLETED, CANCELLED, TIMEOUT, PREEMPTED, ...) is an ended job.
_SLURM_QUEUED = {
    "PENDING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESV_DEL_HOLD",
    "CONFIGURING",
    "RESIZING",
}
_SLURM_RUNNING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED"}
# Ended jobs whose run has no outcome of its own are failed (else interrupted, resumable).
_SLURM_FAILED = {"FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL"}

# States of a run (sweep_status): the first two are final and never resubmitted.
STATES = (
    "finished",  # summary.json: trained to the end
    "diverged",  # summary.json: stopped on a non-finite loss (a result; rerunning repeats it)
    "running",  # its job is running
    "queued",  # its job waits in the scheduler's queue
    "unknown",  # the scheduler has no word on its job (sacct lagging or absent): left alone
    "failed",  # failure.json, or its job ended failing: resubmitted
    "interrupted",  # stopped, preempted or killed before finishing: resubmitted, resumes
    "pending",  # never submitted: submitted
    "waiting",  # a confirmation run whose variant's selection is not complete: not yet planned
)
SUBMIT_STATES = ("failed", "interrupted", "pending")


def _flag(field: str) -> str:
    return f"--slurm_{field}"


@dataclasses.dataclass(frozen=True)
class SlurmResources:
    """What the job of each run asks the scheduler for; field <name> is flag --slurm_<name>.

    A sweep file may define `get_slurm()` returning one; flags override its fields.

    Attributes:
      partition: Slurm partition (sbatch --partition); None: the cluster's default.
      gpus: GPUs per run (--gpus-per-node; each run is one task on one node).
      cpus: CPUs per run (--cpus-per-task); None: the cluster's default.
      mem_gb: memory per run in GB (--mem); None: the partition's default.
      time_min: time limit of one job in minutes (--time). A run that needs longer is stopped
        with a checkpoint before the limit and requeued (at most max_requeues times per job).
      account: account charged (--account); None: your default account.
      constraint: node features required (--constraint), e.g. "a100|h100".
      array_parallelism: runs of one submission that run at once (the job array's %N).
      signal_delay_s: seconds between the warning signal and the time limit: the trainer's
        time to save a checkpoint.
      max_requeues: time-limit requeues of one job; after that the run is left interrupted and
        the next submission resubmits it. Preemptions do not count.
      setup: shell lines run in the job before the run (e.g. "module load cuda/12.4").
    """

    partition: str | None = None
    gpus: int = 0
    cpus: int | None = None
    mem_gb: float | None = None
    time_min: int = 60
    account: str | None = None
    constraint: str | None = None
    array_parallelism: int = 256
    signal_delay_s: int = 120
    max_requeues: int = 3
    setup: tuple[str, ...] = ()

    def __post_init__(self):
        def bad(field: str, valid: str):
            return ValueError(
                f"{_flag(field)}={getattr(self, field)!r} (or SlurmResources({field}=...) in the "
                f"sweep file): {valid}"
            )

        for field in ("partition", "account", "constraint"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise bad(field, "must be a non-empty string, or unset for the cluster default")
        minimums = {"gpus": 0, "cpus": 1, "time_min": 1, "array_parallelism": 1}
        minimums |= {"signal_delay_s": 1, "max_requeues": 0}
        for field, minimum in minimums.items():
            value = getattr(self, field)
            if value is None and field == "cpus":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise bad(field, f"must be an integer >= {minimum}")
        if self.mem_gb is not None and (
            isinstance(self.mem_gb, bool)
            or not isinstance(self.mem_gb, int | float)
            or not math.isfinite(self.mem_gb)
            or self.mem_gb <= 0
        ):
            raise bad("mem_gb", "must be a number of GB > 0 (e.g. 16 or 7.5)")
        if self.signal_delay_s >= 60 * self.time_min:
            raise bad(
                "signal_delay_s",
                f"must be shorter than the time limit (--slurm_time_min={self.time_min}, "
                f"{60 * self.time_min} s)",
            )
        setup = tuple(self.setup) if isinstance(self.setup, list | tuple) else None
        if setup is None or not all(isinstance(line, str) for line in setup):
            raise bad("setup", "must be a list of shell lines")
        object.__setattr__(self, "setup", setup)

    def executor_parameters(self, name: str) -> dict[str, Any]:
        """submitit AutoExecutor parameters: generic ones, plus slurm_ ones the local executor
        ignores. None (unset) leaves the value to the cluster."""
        params = {
            "name": name,
            "timeout_min": self.time_min,
            # No GPU line without GPUs: some clusters refuse gres requests they do not define.
            "gpus_per_node": self.gpus or None,
            "cpus_per_task": self.cpus,
            "mem_gb": self.mem_gb,
            "slurm_partition": self.partition,
            "slurm_account": self.account,
            "slurm_constraint": self.constraint,
            "slurm_array_parallelism": self.array_parallelism,
            "slurm_signal_delay_s": self.signal_delay_s,
            "slurm_setup": list(self.setup) or None,
        }
        return {k: v for k, v in params.items() if v is not None}


RESOURCE_FIELDS = tuple(f.name for f in dataclasses.fields(SlurmResources))


def _parse(field: str, text: str) -> Any:
    """A flag's text as the type of SlurmResources.<field>."""
    kind = {"gpus": int, "cpus": int, "time_min": int, "array_parallelism": int}
    kind |= {"signal_delay_s": int, "max_requeues": int, "mem_gb": float}
    parse = kind.get(field)
    if parse is None:
        return text
    try:
        return parse(text)
    except ValueError:
        what = "an integer" if parse is int else "a number of GB (e.g. 16 or 7.5)"
        raise ValueError(f"{_flag(field)}={text}: must be {what}") from None


def resources(sweep_file: str | None, flag_values: Mapping[str, Any]) -> SlurmResources:
    """The sweep file's get_slurm() (defaults without one), overridden by the flags set.

    flag_values: field name -> flag text (a list of lines for setup); None or [] when unset.
    """
    base = SlurmResources()
    if sweep_file is not None:
        get_slurm = getattr(_import(sweep_file), "get_slurm", None)
        if get_slurm is not None:
            base = get_slurm()
            if not isinstance(base, SlurmResources):
                raise ValueError(
                    f"get_slurm() in {sweep_file!r} returned {type(base).__name__}; it must "
                    "return a transformer_jax.sweep.slurm.SlurmResources"
                )
    changes = {}
    for field, value in flag_values.items():
        if field not in RESOURCE_FIELDS:
            raise ValueError(f"unknown resource {field!r}; valid: {', '.join(RESOURCE_FIELDS)}")
        if value is None or (field == "setup" and not value):
            continue
        changes[field] = tuple(value) if field == "setup" else _parse(field, value)
    return dataclasses.replace(base, **changes)


def _import(path: str) -> Any:
    name = "_sweep_resources_" + re.sub(r"\W", "_", os.path.basename(path))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- The job ------------------------------------------------------------------------------------


class TrainJob(submitit.helpers.Checkpointable):
    """The callable submitit pickles and runs in the job: trains one run, or one seed group (a
    variant's seeds as one process, transformer_jax/train/seed_group.py), as a subprocess.

    The same launch as the local runner (command.txt, run.log, failure.json, launcher.Launch,
    the sweep's compilation cache through `env`), so a run can move between launchers. submitit
    calls `checkpoint` on the warning signal of preemption or time limit (see the module
    docstring).
    """

    def __init__(
        self,
        workdir: str,
        spec: RunSpec | GroupSpec,
        cwd: str,
        env: Mapping[str, str] | None = None,
    ):
        self.workdir, self.spec, self.cwd, self.env = workdir, spec, cwd, dict(env or {})
        self._launch: launcher_lib.Launch | None = None

    def __getstate__(self):
        return {"workdir": self.workdir, "spec": self.spec, "cwd": self.cwd, "env": self.env}

    def __setstate__(self, state):
        self.__dict__.update({"env": {}, **state})
        self._launch = None

    def _records(self) -> list[sweep_dir.RunRecord]:
        return [sweep_dir.read_run(self.workdir, r.variant, r.seed) for r in self.spec.runs]

    def __call__(self) -> str:
        """Trains the runs; returns their status (a seed group's worst), or raises when one
        failed (the job fails too)."""
        spec = self.spec
        if all(r.status in sweep_dir.DONE_STATUSES for r in self._records()):
            return self._worst()  # requeued after the runs ended: nothing left to do
        locks = []
        try:
            for run in spec.runs:
                os.makedirs(run.path, exist_ok=True)
                locks.append(lock_run(run.path))
        except ValueError as e:
            # A duplicate job (e.g. resubmitted while the scheduler lost track of the first):
            # leave the run directories to the process training them.
            logging.warning("%s: %s; this job leaves it alone", spec.name, e)
            return "busy"
        finally:
            for lock in locks:
                lock.close()
        # Blocked signals stay blocked across fork and exec: Slurm's USR2 then reaches the
        # trainer as nothing, while this process (submitit's handler) receives it after the
        # unblock even when it arrived during the launch.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
        try:
            self._launch = launcher_lib.Launch(spec, None, self.cwd, self.env)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        # The trainer is waited for in a thread: submitit's signal handler runs checkpoint() in
        # this thread, and its wait would deadlock on the lock a Popen.wait here holds.
        proc = self._launch.proc
        threading.Thread(target=proc.wait, daemon=True).start()
        try:
            while proc.returncode is None:
                time.sleep(0.1)
        finally:
            # Also on an exception: submitit's requeue exits from inside the signal handler
            # (SystemExit), the local executor's cancel is a SIGINT (KeyboardInterrupt).
            status = self._finish()
        if status == "failed":
            failed = [r for r in self._records() if r.status == "failed"]
            errors = "; ".join(
                f"{r.error}" if len(spec.runs) == 1 else f"seed {r.seed}: {r.error}" for r in failed
            )
            logs = ", ".join(f"{r.path}/run.log" for r in failed)
            raise RuntimeError(f"run {spec.name} failed: {errors} (see {logs})")
        return status

    def _worst(self) -> str:
        """The runs' status: failed before incomplete before diverged before finished."""
        order = ("failed", "incomplete", "missing", "diverged", "finished")
        return min((r.status for r in self._records()), key=order.index)

    def _finish(self) -> str:
        """Stops the trainer if it still runs (SIGTERM: it saves a checkpoint) and records how
        each run ended (failure.json when it failed); idempotent."""
        launch, self._launch = self._launch, None
        if launch is None:
            return self._worst()
        launch.terminate()
        duration = time.monotonic() - launch.start
        for run in launch.runs:
            launcher_lib.record_outcome(self.workdir, launch, duration, run)
        return self._worst()

    def checkpoint(self, *args, **kwargs):
        """submitit's preemption / time-limit hook: stop the trainer with a checkpoint, then be
        requeued as the same job (which resumes the runs)."""
        del args, kwargs
        status = self._finish()
        logging.warning("%s stopped (%s) for a requeue", self.spec.name, status)
        return submitit.helpers.DelayedSubmission(
            TrainJob(self.workdir, self.spec, self.cwd, self.env)
        )


# --- Scheduler states ---------------------------------------------------------------------------


def _slurm_states(job_ids: Sequence[str]) -> dict[str, str]:
    """sacct's State of each job (submitit's parser); "UNKNOWN" when sacct does not know it."""
    watcher = SlurmInfoWatcher(delay_s=0)  # a fresh one: no cache shared across calls
    for job_id in job_ids:
        watcher.register_job(job_id)
    watcher.update()
    return {j: watcher.get_state(j, mode="cache").split()[0] for j in job_ids}


def _local_states(job_ids: Sequence[str]) -> dict[str, str]:
    """A submitit_local job id is the pid of its controller process on the submitting host."""
    return {j: "RUNNING" if _controller_alive(j) else "ENDED" for j in job_ids}


def _controller_alive(job_id: str) -> bool:
    try:
        with open(f"/proc/{int(job_id)}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{int(job_id)}/cmdline", "rb") as f:
            cmdline = f.read()
    except (OSError, ValueError, IndexError):
        return False
    # A zombie has ended (its parent has not reaped it); a reused pid runs something else.
    return state not in ("Z", "X") and b"submitit.local" in cmdline


@dataclasses.dataclass(frozen=True)
class Launcher:
    """A submitit launcher: the AutoExecutor cluster it uses and how to ask for job states."""

    cluster: str
    states: Callable[[Sequence[str]], dict[str, str]]
    # Why it cannot submit from here, or None.
    unavailable: Callable[[], str | None]


LAUNCHERS = {
    "slurm": Launcher(
        "slurm",
        _slurm_states,
        lambda: (
            None
            if shutil.which(_SLURM_PROBE)
            else f"no `{_SLURM_PROBE}` on PATH: submit from a Slurm login node (or use "
            "--launcher=submitit_local to try the job path on this machine)"
        ),
    ),
    "submitit_local": Launcher(
        "local",
        _local_states,
        lambda: None if sys.platform.startswith("linux") else "it reads job states from /proc",
    ),
}


def check_launcher(name: str, parallel: int, flag_values: Mapping[str, Any]) -> str:
    """Raises ValueError for an unknown launcher, or flags that do not go with it."""
    valid = (LOCAL, *LAUNCHERS)
    if name not in valid:
        raise ValueError(f"--launcher={name}: unknown launcher; valid: {', '.join(valid)}")
    given = [f for f, v in flag_values.items() if v not in (None, [], ())]
    if name == LOCAL and given:
        raise ValueError(
            f"{_flag(given[0])}={flag_values[given[0]]} needs a job launcher: add "
            f"--launcher=slurm (or submitit_local); with --launcher={LOCAL} runs are subprocesses"
        )
    if name != LOCAL and parallel != 1:
        raise ValueError(
            f"--parallel={parallel} is for --launcher={LOCAL}; with --launcher={name} the number "
            "of runs at once is --slurm_array_parallelism"
        )
    return name


# --- Run states ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunState:
    """One run of a sweep as --status shows it."""

    variant: str
    seed: int
    state: str  # one of STATES
    job_id: str | None
    submitted: str | None
    detail: str

    @property
    def name(self) -> str:
        return f"{self.variant}/seed_{self.seed}"


def read_job(path: str) -> dict[str, Any] | None:
    job = read_json(os.path.join(path, JOB_FILE))
    return job if isinstance(job, dict) else None


def run_state(
    record: sweep_dir.RunRecord,
    job: Mapping[str, Any] | None,
    scheduler: str | None,
    metrics: Sequence[str] = (),
) -> tuple[str, str]:
    """(state, detail) of a run from its run directory and its last job's scheduler state
    (sacct's State word; None without a job). detail names `metrics` of a finished run.

    The run directory decides final outcomes; a live job decides queued and running (a failed
    run being retried is queued, not failed); an ended job leaves the run failed or interrupted.
    """
    if record.status in sweep_dir.DONE_STATUSES:
        values = [f"{m}={v:.4g}" for m in metrics if (v := record.metric(m)) is not None]
        return record.status, record.error or ", ".join(values)
    job_id = job.get("job_id") if job else None
    if job and scheduler in _SLURM_QUEUED:
        return "queued", scheduler
    if job and scheduler in _SLURM_RUNNING:
        return "running", scheduler
    if job and scheduler == "UNKNOWN":
        return "unknown", (
            f"the scheduler has no record of job {job_id} (yet): not resubmitted; if it is gone, "
            f"delete {os.path.join(record.path, JOB_FILE)} to resubmit the run"
        )
    holder = run_dir.lock_holder(record.path)
    if holder is not None:  # e.g. a job controller killed while its trainer trains on
        ended = f"job {job_id} ended {scheduler}, but " if job else ""
        return "running", (
            f"{ended}process {holder} still trains it (it holds {run_dir.LOCK_FILE}): not "
            "resubmitted until it ends; stop it to resubmit now"
        )
    if record.status == "failed":
        return "failed", record.error or "failure.json"
    if job and scheduler in _SLURM_FAILED:
        return "failed", f"job {job_id} ended {scheduler}; see {job_log(job)}"
    if record.status == "incomplete" or job:
        ended = f"job {job_id} ended {scheduler}; " if job else ""
        return "interrupted", f"{ended}resumes from its last checkpoint when resubmitted"
    return "pending", "not submitted"


@contextlib.contextmanager
def _detached_output(launcher: str):
    """While submitit_local starts its job controllers, points this process's stdout and stderr
    at /dev/null: the controllers outlive the command and inherit them (their jobs log to the
    job folder), and a command whose output is piped would otherwise not end before its jobs."""
    if LAUNCHERS[launcher].cluster != "local":
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def job_log(job: Mapping[str, Any]) -> str:
    """The job's stderr log written by submitit."""
    return os.path.join(job["folder"], f"{job['job_id']}_0_log.err")


def sweep_status(workdir: str, specs: Sequence[RunSpec] | None = None) -> list[RunState]:
    """The state of every run of the sweep in workdir (or of `specs`), asking each launcher's
    scheduler once about the jobs recorded in job.json."""
    workdir = os.path.abspath(workdir)
    sweep = Sweep.from_dict(sweep_dir.read_sweep_json(workdir))
    waiting: list[RunState] = []
    if specs is None:
        # With nuisance factors, every setting of every variant ("<variant>/<setting>"), then
        # the confirmation runs (confirm_seeds) of each variant. The selection runs' directories
        # are read first, so a job that ends in between never shows finished runs beside a
        # confirmation still waiting for them.
        pairs = [(v, s) for v in sweep.run_variants for s in sweep.seeds]
        records = [sweep_dir.read_run(workdir, v, s) for v, s in pairs]
        confirm, waiting = _confirm_pairs(sweep, workdir)
        records += [sweep_dir.read_run(workdir, v, s) for v, s in confirm]
    else:
        records = [sweep_dir.read_run(workdir, s.variant, s.seed) for s in specs]
    jobs = [read_job(r.path) for r in records]
    by_launcher = collections.defaultdict(list)
    for job in jobs:
        if job and job.get("launcher") in LAUNCHERS:
            by_launcher[job["launcher"]].append(job["job_id"])
    states: dict[tuple[str, str], str] = {}
    for name, ids in by_launcher.items():
        for job_id, state in LAUNCHERS[name].states(ids).items():
            states[name, job_id] = state
    out = []
    for record, job in zip(records, jobs, strict=True):
        if job and job.get("launcher") == "submitit_local" and job.get("hostname") != _host():
            scheduler = "UNKNOWN"  # Its controller runs on another machine.
        else:
            scheduler = states.get((job["launcher"], job["job_id"])) if job else None
        state, detail = run_state(record, job, scheduler, sweep.recorded_metrics)
        out.append(
            RunState(
                record.variant,
                record.seed,
                state,
                job.get("job_id") if job else None,
                job.get("submitted") if job else None,
                detail,
            )
        )
    return out + waiting


def _confirm_pairs(sweep: Sweep, workdir: str) -> tuple[list[tuple[str, int]], list[RunState]]:
    """The confirmation runs --status lists: (run variant, seed) of each chosen setting and of
    any other setting that has runs (a selection changed since), and a "waiting" state per
    confirm seed of each variant whose selection is not complete."""
    if not sweep.confirm_seeds:
        return [], []
    runs = selection.read_runs(sweep, workdir)
    settings = selection.confirm_settings(sweep, runs)
    stale = selection.stale_confirmations(sweep, runs, settings)
    pairs, waiting = [], []
    for variant in sweep.variants:
        if variant not in settings:
            waiting += [
                RunState(
                    f"{variant}/{nuisance.CONFIRM}",
                    seed,
                    "waiting",
                    None,
                    None,
                    "its selection runs are not all done yet",
                )
                for seed in sweep.confirm_seeds
            ]
            continue
        for setting in [settings[variant], *stale.get(variant, [])]:
            name = nuisance.confirm_run_variant(variant, setting)
            pairs += [(name, seed) for seed in sweep.confirm_seeds]
    return pairs, waiting


def format_status(states: Sequence[RunState]) -> str:
    """A fixed-width table, one line per run, then the count per state."""
    header = ("run", "state", "job", "submitted", "detail")
    rows = [header] + [
        (s.name, s.state, s.job_id or "-", s.submitted or "-", s.detail) for s in states
    ]
    widths = [max(len(r[k]) for r in rows) for k in range(len(header) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in rows
    ]
    counts = collections.Counter(s.state for s in states)
    lines.append(", ".join(f"{n} {state}" for state in STATES if (n := counts[state])))
    return "\n".join(line.rstrip() for line in lines)


def _host() -> str:
    return platform.node()


# --- Submission ---------------------------------------------------------------------------------


def submit_sweep(
    sweep: Sweep,
    sweep_file: str,
    workdir: str,
    *,
    launcher: str,
    slurm: SlurmResources,
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    quick: bool = False,
    main_module: str | None = None,
    command: str = "",
    seed_groups: bool = True,
    compile_cache: bool = True,
    allow_dirty: bool = False,
    replace: bool = False,
) -> list[RunState]:
    """Submits the selected runs that are pending, interrupted or failed; returns their states.

    Everything is checked (sweep, overrides, run directories, launcher) before anything is
    written. Finished and diverged runs are skipped, queued and running jobs left alone. One
    submission is one job array on Slurm (array_parallelism of its jobs at once). With
    `seed_groups` the runs to submit of each variant are one job, trained as one seed group
    (`runner.launches`, which also says when a variant's seeds train alone); with
    `compile_cache` the jobs share the sweep's compilation cache, WORKDIR/.compile_cache, on
    the shared filesystem. A variant's confirmation runs (Sweep.confirm_seeds) are submitted
    by the first submission after its selection runs are done; a tree with uncommitted changes
    to the code is refused unless `allow_dirty` (sweep/code_version.py), a workdir holding
    another sweep unless `replace` (sweep_dir.update_sweep_json).
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"--launcher={launcher}: valid job launchers: {', '.join(LAUNCHERS)}")
    if sweep.grid_extension is not None or sweep.confirm_rounds:
        raise ValueError(
            f"--launcher={launcher}: a sweep with grid_extension or confirm_rounds decides its "
            "next runs from the last ones; it runs with --launcher=local only"
        )
    why = LAUNCHERS[launcher].unavailable()
    if why:
        raise ValueError(f"--launcher={launcher} cannot submit here: {why}")
    main_module = main_module or runner.DEFAULT_MAIN
    with runner.locked_sweep(
        sweep,
        sweep_file,
        workdir,
        variants=variants,
        seeds=seeds,
        quick=quick,
        main_module=main_module,
        command=command,
        machine=_requested_machine(launcher, slurm),
        allow_dirty=allow_dirty,
        replace=replace,
        launcher=launcher,
        resources=dataclasses.asdict(slurm),
    ) as (workdir, config_spec, specs, _):
        before = sweep_status(workdir, specs)
        todo = [s for s, st in zip(specs, before, strict=True) if st.state in SUBMIT_STATES]
        counts = collections.Counter(st.state for st in before)
        logging.info(
            "sweep %s: %d runs; submitting %d (%s); leaving %s",
            sweep_file,
            len(specs),
            len(todo),
            ", ".join(f"{counts[k]} {k}" for k in SUBMIT_STATES if counts[k]) or "none",
            ", ".join(f"{n} {k}" for k, n in counts.items() if k not in SUBMIT_STATES) or "none",
        )
        if todo:
            folder = os.path.join(workdir, JOBS_DIR)
            executor = submitit.AutoExecutor(
                folder,
                cluster=LAUNCHERS[launcher].cluster,
                **{f"{LAUNCHERS[launcher].cluster}_max_num_timeout": slurm.max_requeues},
            )
            name = os.path.splitext(os.path.basename(sweep_file))[0]
            executor.update_parameters(**slurm.executor_parameters(f"sweep_{name}"))
            cwd = os.getcwd()
            # A group's runs that have ended hold their lanes: the group stays one program.
            done = [s for s, st in zip(specs, before, strict=True) if st.state in STATES[:2]]
            units = runner.launches(
                sweep, workdir, todo, config_spec, main_module, seed_groups, [*todo, *done]
            )
            env = runner.compile_cache_env(workdir) if compile_cache else {}
            with _detached_output(launcher), executor.batch():
                jobs = [executor.submit(TrainJob(workdir, unit, cwd, env)) for unit in units]
            submitted = launcher_lib.now()
            for unit, job in zip(units, jobs, strict=True):
                for spec in unit.runs:
                    _record_job(spec.path, launcher, str(job.job_id), submitted, folder)
                logging.info("submitted %s as job %s", unit.name, job.job_id)
    return sweep_status(workdir, specs)


def _requested_machine(launcher: str, slurm: SlurmResources) -> dict[str, Any]:
    """The report's machine line for runs trained by the scheduler's nodes: what each job asked
    for (the nodes are not known when the sweep is submitted)."""
    return {
        "platform": launcher,
        "device_count": slurm.gpus,
        "device_kind": "GPU per run" if slurm.gpus else "no GPU",
        "cpu_count": slurm.cpus or "default",
        "hostname": f"nodes of partition {slurm.partition or '(default)'}, submitted from "
        f"{_host()}",
    }


def _record_job(path: str, launcher: str, job_id: str, submitted: str, folder: str) -> None:
    """job.json: this submission, with the earlier ones kept under "previous"."""
    os.makedirs(path, exist_ok=True)
    previous = read_job(path)
    history = []
    if previous is not None:
        history = previous.pop("previous", []) + [previous]
    record = {
        "launcher": launcher,
        "job_id": job_id,
        "submitted": submitted,
        "folder": folder,
        "hostname": _host(),
        "previous": history,
    }
    write_json(os.path.join(path, JOB_FILE), record)


def flag_names() -> dict[str, str]:
    """Resource field -> its flag name (without dashes)."""
    return {f: _flag(f)[2:] for f in RESOURCE_FIELDS}


def define_flags() -> None:
    """The --launcher, --status and --slurm_* flags (called by sweep_cli.define_flags)."""
    from absl import flags

    flags.DEFINE_string(
        "launcher",
        LOCAL,
        f"How runs are started: {LOCAL} (subprocesses here), slurm (a Slurm job each, via "
        "submitit) or submitit_local (submitit's job path on this machine).",
    )
    flags.DEFINE_bool("status", False, "Print the state of every run (with its job id) and exit.")
    docs = {
        "partition": "Slurm partition.",
        "gpus": "GPUs per run.",
        "cpus": "CPUs per run.",
        "mem_gb": "Memory per run in GB.",
        "time_min": "Time limit of a job in minutes; longer runs are stopped and requeued.",
        "account": "Slurm account charged.",
        "constraint": "Node features required, e.g. 'a100|h100'.",
        "array_parallelism": "Runs of one submission running at once.",
        "signal_delay_s": "Seconds before the time limit the trainer is stopped to save.",
        "max_requeues": "Time-limit requeues of a job.",
    }
    defaults = SlurmResources()
    for field, doc in docs.items():
        default = getattr(defaults, field)
        default = "the cluster's" if default is None else default
        doc += f" Default: {default} (or the sweep file's get_slurm())."
        flags.DEFINE_string(flag_names()[field], None, doc)
    flags.DEFINE_multi_string(
        flag_names()["setup"], [], "Shell line run in each job first (repeatable)."
    )


def flag_values(values: Any) -> dict[str, Any]:
    """The --slurm_* flags of absl FLAGS as field -> text (None or [] when unset)."""
    return {field: getattr(values, name) for field, name in flag_names().items()}
