"""Launching one sweep run as a subprocess and recording how it ended.

Holds RunSpec (one run's directory and argv), Launch (the running process), cpu_slots (the CPUs
parallel runs are pinned to), WorkdirLock and record_outcome (failure.json). Used by the runner:
a run's stdout and stderr go to run.log (stderr also to a tail buffer for failure.json), parallel
runs are pinned to disjoint CPUs, and a workdir lock keeps two runners from training the same run
at once.
"""

import collections
import contextlib
import ctypes
import dataclasses
import datetime
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from absl import logging

from transformer_jax import sweep_dir
from transformer_jax.commands import recorded_shell_command
from transformer_jax.run_dir import (
    COMMAND_FILE,
    DIVERGED_EXIT_CODE,
    FAILURE_FILE,
    HPARAMS_FILE,
    LOG_FILE,
    STOPPED_EXIT_CODE,
    record_code,
    write_json,
)
from transformer_jax.sweep import code_version

STDERR_TAIL_LINES = 60
LOCK_FILE = ".sweep.lock"
TERMINATE_GRACE_S = 120


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One (variant, seed) run: where it lives and the argv that trains it."""

    variant: str
    seed: int
    path: str
    argv: tuple[str, ...]
    # hparams.json of the run (run_dir.HPARAMS_FILE: sweep name and hparams), written when it
    # is launched; {} writes none.
    hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    # The code version of the sweep's launch (sweep/code_version.py); not {}: the run records
    # in its code.json (run_dir.CODE_FILE) the version read when it starts (`Launch`), which
    # differs where the code was edited meanwhile. {} records none.
    code: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        return f"{self.variant}/seed_{self.seed}"

    @property
    def runs(self) -> tuple["RunSpec", ...]:
        return (self,)


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """Runs trained by one process as one program (transformer_jax/train/seed_group.py): the
    seeds of one run variant as a seed group (`main --seeds`), or a tuned cell's settings and
    seeds as a run group (`main --runs`); `argv` trains all of `runs`. `held`: the group's runs
    that ended before this launch, in `argv` too, so that the group is the program it was
    (sweep/runner.py `launches`); the trainer leaves them as they are, and so does the launch
    (no command.txt, code.json or run.log line of theirs changes)."""

    runs: tuple[RunSpec, ...]
    argv: tuple[str, ...]
    held: tuple[RunSpec, ...] = ()

    @property
    def kind(self) -> str:
        variants = {r.variant for r in (*self.runs, *self.held)}
        return "seed group" if len(variants) == 1 else "run group"

    @property
    def name(self) -> str:
        if self.kind == "seed group":
            return f"{self.runs[0].variant}/seed_{{{','.join(str(r.seed) for r in self.runs)}}}"
        cell = self.runs[0].variant.partition("/")[0]
        return f"{cell}/{{{len(self.runs)} runs}}"


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


class WorkdirLock:
    """WORKDIR/.sweep.lock: two runners in one workdir would train the same run twice at once."""

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, LOCK_FILE)

    def __enter__(self):
        me = self._me()
        # Runners check, take and release the lock one at a time under a guard file they flock
        # (and never remove): two runners finding one stale lock would otherwise both remove
        # it, and one would fail or remove the other's new lock; a lock released between
        # another runner's failed create and its read of the file would be read as missing.
        with self._guard():
            while True:
                try:
                    fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                    break
                except FileExistsError:
                    pass
                try:
                    with open(self.path) as f:
                        other = json.load(f)
                except FileNotFoundError:
                    continue  # released (or deleted by hand) since: take it
                except (OSError, json.JSONDecodeError):
                    other = None  # cut short by a killed runner: written under the guard
                stale = not isinstance(other, dict) or (
                    other.get("hostname") == me["hostname"] and not _alive(other.get("pid"))
                )
                if not stale:
                    raise ValueError(
                        f"another sweep runner ({other}) is using this workdir; wait for it, or "
                        f"delete {self.path} if it is no longer running"
                    )
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.path)  # left behind by a runner that was killed
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
        return self

    def __exit__(self, *exc):
        # Under the guard, and only this runner's own lock: never one another runner took over.
        if not os.path.isdir(os.path.dirname(self.path)):
            return  # the workdir was removed meanwhile, the lock with it
        with self._guard():
            try:
                with open(self.path) as f:
                    holder = json.load(f)
            except (OSError, json.JSONDecodeError):
                return
            if holder == self._me():
                os.remove(self.path)

    @staticmethod
    def _me() -> dict[str, Any]:
        return {"pid": os.getpid(), "hostname": socket.gethostname()}

    @contextlib.contextmanager
    def _guard(self):
        with open(self.path + ".guard", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)  # released when the guard is closed
            yield


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cpu_slots(parallel: int) -> list[list[int] | None]:
    """CPUs each of `parallel` concurrent runs is pinned to (None: no pinning for one run).

    XLA's CPU client sizes its thread pools from the process's CPU affinity; pinning disjoint CPU
    sets is what actually keeps parallel runs from oversubscribing the cores (XLA_FLAGS
    --xla_cpu_multi_thread_eigen=false did not reduce the threads of jax 0.10 CPU matmuls).
    """
    if parallel <= 1 or not hasattr(os, "sched_getaffinity"):
        return [None] * max(parallel, 1)
    cpus = sorted(os.sched_getaffinity(0))
    if parallel >= len(cpus):
        return [[cpus[k % len(cpus)]] for k in range(parallel)]
    per = len(cpus) // parallel
    return [cpus[k * per : (k + 1) * per] for k in range(parallel)]


def gpu_slots(parallel: int) -> list[list[str] | None]:
    """GPUs each of `parallel` concurrent runs gets (CUDA_VISIBLE_DEVICES), or None everywhere
    where there are fewer than two GPUs or one run at a time: the runs of a sweep then train on
    different GPUs at once instead of all on GPU 0. The GPUs are those CUDA_VISIBLE_DEVICES
    lists, else those `nvidia-smi -L` finds; with more runs than GPUs some runs share one."""
    gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if not gpus and parallel > 1 and shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            listing = subprocess.run(
                ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True
            ).stdout
            gpus = [str(i) for i, line in enumerate(listing.splitlines()) if line.startswith("GPU")]
    if parallel <= 1 or len(gpus) < 2:
        return [None] * max(parallel, 1)
    if parallel >= len(gpus):
        return [[gpus[k % len(gpus)]] for k in range(parallel)]
    per = len(gpus) // parallel
    return [gpus[k * per : (k + 1) * per] for k in range(parallel)]


def _child_setup(cpus: list[int] | None):
    """A Popen preexec_fn run in the child before it starts the trainer: pins it to `cpus`
    (None: no pinning), so XLA sizes its thread pools from the pinned set however late the
    runner gets the CPU back, and makes it receive SIGTERM (the trainer's save-and-stop) when
    this runner dies, even by SIGKILL: an orphaned trainer would keep writing its run directory
    while a rerun of the sweep starts a second one there. Linux prctl(PR_SET_PDEATHSIG); no such
    guard elsewhere. libc is looked up here, before the fork."""
    prctl = None
    if sys.platform.startswith("linux"):
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def setup():
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # The runner died before prctl took effect.
                os.kill(os.getpid(), signal.SIGTERM)

    return setup if cpus is not None or prctl is not None else None


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class Launch:
    """A launched run or seed group: its process, and threads copying its output into the
    run.log of each of its runs and stderr into a tail buffer."""

    def __init__(
        self,
        spec: RunSpec | GroupSpec,
        cpus: list[int] | None,
        cwd: str,
        env: Mapping[str, str] | None = None,
        gpus: list[str] | None = None,
    ):
        """Starts `spec` in `cwd`, pinned to `cpus` and given `gpus` (None: all), with the
        extra environment variables `env` (recorded in command.txt with the others)."""
        variables = dict(env or {})
        if cpus is not None:
            variables.update(
                {k: str(len(cpus)) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
            )
            # Several runs share one accelerator: allocate on demand instead of 75% up front each.
            variables["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        if gpus is not None:
            variables["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        env = {**os.environ, **variables}
        self.command_line = recorded_shell_command(spec.argv, cwd, variables)
        # The code this process trains with: read now, not at the sweep's launch.
        code = code_version.read(cwd).to_json() if any(r.code for r in spec.runs) else None
        for run in spec.runs:
            os.makedirs(run.path, exist_ok=True)
            with open(os.path.join(run.path, COMMAND_FILE), "w") as f:
                f.write(f"# sweep run {run.name}\n")
                if cpus is not None:
                    f.write(f"# pinned to CPUs {cpus} (sched_setaffinity) by --parallel\n")
                if isinstance(spec, GroupSpec):
                    # The command of the run alone stays the last line: it resumes this seed by
                    # itself, and it is what check_commands compares.
                    f.write(f"# trained in the {spec.kind} {spec.name} by:\n")
                    f.write(f"# {self.command_line}\n")
                    f.write(recorded_shell_command(run.argv, cwd, variables) + "\n")
                else:
                    f.write(self.command_line + "\n")
            if run.hparams:
                write_json(os.path.join(run.path, HPARAMS_FILE), run.hparams)
            if run.code:
                record_code(run.path, code)
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(run.path, FAILURE_FILE))
        self.spec = spec
        self.runs = spec.runs
        self.start = time.monotonic()
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        # Unbuffered append: a run's process writes stdout to its run.log directly, and the
        # copier threads append stderr (and a group's stdout, to every seed's run.log) lines,
        # all with O_APPEND, so none overwrites another.
        self.logs = [
            open(os.path.join(run.path, LOG_FILE), "ab", buffering=0)  # noqa: SIM115
            for run in self.runs
        ]
        for log in self.logs:
            log.write(f"\n===== {now()} {self.command_line}\n".encode())
        self.proc = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=self.logs[0] if len(self.logs) == 1 else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            preexec_fn=_child_setup(cpus),
        )
        self.copiers = [threading.Thread(target=self._copy_stderr, daemon=True)]
        if self.proc.stdout is not None:
            self.copiers.append(threading.Thread(target=self._copy_stdout, daemon=True))
        for copier in self.copiers:
            copier.start()

    def _copy_stderr(self):
        for line in self.proc.stderr:
            for log in self.logs:
                log.write(line)
            self.tail.append(line.decode(errors="replace"))

    def _copy_stdout(self):
        for line in self.proc.stdout:
            for log in self.logs:
                log.write(line)

    def close(self) -> float:
        """Waits for the stderr copy to finish; returns the run's duration in seconds."""
        for copier in self.copiers:
            copier.join()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        for log in self.logs:
            log.close()
        return time.monotonic() - self.start

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                # The trainer saves a checkpoint on SIGTERM before exiting; give it time.
                self.proc.wait(timeout=TERMINATE_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.close()


def record_outcome(
    workdir: str, run: "Launch", duration: float, spec: RunSpec | None = None
) -> sweep_dir.RunRecord:
    """Classifies a completed run (`spec`, one of the runs of a seed group's launch) and writes
    failure.json for a failed or diverged one."""
    spec, rc = spec or run.spec, run.proc.returncode
    record = sweep_dir.read_run(workdir, spec.variant, spec.seed)
    if record.status == "finished":
        # A seed group exits with DIVERGED_EXIT_CODE when any of its seeds diverged (one held
        # from before included).
        members = len(run.runs) + len(getattr(run.spec, "held", ()))
        sibling_diverged = members > 1 and rc == DIVERGED_EXIT_CODE
        if rc != 0 and not sibling_diverged:
            logging.warning("%s wrote a finished summary but exited with %d", spec.name, rc)
        return record
    if record.status == "incomplete" and rc in (0, STOPPED_EXIT_CODE):
        # The trainer stops on SIGTERM/SIGINT after saving a checkpoint and exits with
        # STOPPED_EXIT_CODE (0 before it had one) without a summary: an interruption, resumed by
        # the next launch, not a failure.
        logging.warning("%s stopped before finishing (signal?); rerun to resume", spec.name)
        return record
    tail = "".join(run.tail)
    if record.status == "diverged":
        error = record.error or "non-finite loss"
    elif rc < 0:
        error = f"killed by {signal.Signals(-rc).name}" + (" (out of memory?)" if rc == -9 else "")
    else:
        lines = [line.strip() for line in run.tail if line.strip()]
        error = lines[-1] if lines else f"exited with code {rc}"
    failure = {
        "status": "diverged" if record.status == "diverged" else "failed",
        "returncode": rc,
        "error": error,
        "stderr_tail": tail,
        "command": run.command_line,
        "date": now(),
        "duration_s": duration,
    }
    write_json(os.path.join(spec.path, FAILURE_FILE), failure)
    return sweep_dir.read_run(workdir, spec.variant, spec.seed)
