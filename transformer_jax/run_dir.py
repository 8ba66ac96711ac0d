"""The run-directory contract: what a training run and the sweep runner write, and how.

One training run owns one directory (`--workdir`; a sweep lays its runs out as
WORKDIR/<variant>/seed_<seed>/; a seed group, `main --seeds`, writes one per seed,
WORKDIR/seed_<seed>/). The trainer writes config.json, its tokenizer, metrics.jsonl (and its
TensorBoard event files), checkpoints/, summary.json and its TensorBoard HParams session
(tracking/hparams.py), with train.wandb_project also wandb.json and wandb/; the sweep runner adds
hparams.json, code.json, command.txt, run.log and, after a failure, failure.json.
JSON files are written atomically (`write_json`: tmp file + `os.replace`), so a reader polling
a running sweep never sees half a file; `read_json` still treats an unparsable file as absent
(a status listing), while a trainer or reader acting on a run (`read_run_config`) refuses a
damaged config.json by name.
"""

import dataclasses
import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any, Literal, TextIO

import numpy as np

CONFIG_FILE = "config.json"  # the resolved config plus GIT_COMMIT_KEY, written at start
# The tokenizer the run trained with (data/tokenizers.py: write_tokenizer), so that an edited or
# moved corpus or data_dir cache never changes what its ids mean; none for image data.
TOKENIZER_FILE = "tokenizer.json"  # {"kind": "char", "alphabet"} or {"kind": "sentencepiece"}
TOKENIZER_MODEL_FILE = "tokenizer.model"  # a sentencepiece tokenizer's copy of its model file
METRICS_FILE = "metrics.jsonl"  # one JSON object per log/eval event (train/logger.py)
METRICS_LINE_KEYS = ("step", "split", "time")  # a metrics.jsonl line's keys that are no metric
CHECKPOINT_DIR = "checkpoints"  # orbax steps <step>/{state,data} (train/checkpoint.py)
SUMMARY_FILE = "summary.json"  # a RunSummary, once the run finished or diverged
COMMAND_FILE = "command.txt"  # the sweep runner: the exact command that (re)starts the run
LOG_FILE = "run.log"  # the sweep runner: the run's stdout and stderr
LOCK_FILE = ".train.lock"  # the trainer: flock-ed while a process trains the run (lock_run)
FAILURE_FILE = "failure.json"  # the sweep runner: return code, error and stderr tail
# The SHA-256 of the run's records (tamper evidence; docs/reliability.md): {"summary.json":
# [sha256], "tokenizer.json": [sha256], "metrics.jsonl": {"bytes", "sha256"} of its first bytes}.
# A list holds the hashes a reader accepts: two while the file is being replaced
# (`write_recorded`), one otherwise.
CHECKSUMS_FILE = "checksums.json"
# The sweep runner, at every launch that changes it: {"launches": [{"git_commit",
# "diff_sha256"}, ...]}, the code version each launch trained at (sweep/code_version.py).
CODE_FILE = "code.json"
JOB_FILE = "job.json"  # the sweep's job launchers (sweep/slurm.py): launcher, job id, submitted
# The sweep runner, before a run starts: {"sweep": its name, "hparams": {"variant", "seed", cell
# factors, overridden fields}} (sweep/hparams.py), read by the run's trackers (tracking/).
HPARAMS_FILE = "hparams.json"
WANDB_FILE = "wandb.json"  # train.wandb_project: {"id", "project"} of the run's W&B run
TRANSLATIONS_DIR = "translations"  # the bleu evaluator: decoded test split, one line per example
PROFILE_DIR = "profile"  # train.profile_steps: the jax.profiler trace (train/profile.py)

# How the trainer's process exits (besides 0, finished, and the commands' USER_ERROR_EXIT_CODE 2):
DIVERGED_EXIT_CODE = 3  # a non-finite loss: summary.json says "diverged"; rerunning repeats it
# Stopped by SIGTERM/SIGINT after saving a checkpoint, no summary: rerun to resume. sysexits.h's
# EX_TEMPFAIL ("try again later"), distinct from success so scripts that chain on it stop.
STOPPED_EXIT_CODE = 75

GIT_COMMIT_KEY = "git_commit"  # the field of config.json naming the code that trained the run
# The field of config.json listing the changes resumes made, oldest first: {"step": the first
# step trained with them, "git_commit", "changes": {"train.steps": {"from": 60, "to": 80}}}.
# The rest of config.json stays the config of the first steps.
RESUMES_KEY = "resumes"

Status = Literal["finished", "diverged", "stopped", "failed"]
# What summary.json can say: final outcomes (rerunning the same command gives the same result),
# and "failed": a checkpoint could not be saved (a full disk), so rerunning resumes from the last
# good one once the cause is fixed. "stopped" (by a signal, resumable) is returned by the trainer
# but never written.
FINAL_STATUSES: tuple[Status, ...] = ("finished", "diverged")

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def shown(path: str | os.PathLike) -> str:
    """`path` as the trainer's messages print it: relative to the working directory when inside
    it (a sweep passes its runs absolute paths), so a run.log committed with its results names
    the run, not the machine it trained on."""
    path = os.path.abspath(path)
    inside = os.path.commonpath([path, os.getcwd()]) == os.getcwd()
    return os.path.relpath(path) if inside else path


def seed_dir(parent: str | os.PathLike, seed: int) -> str:
    """The run directory of `seed` among the seeds of one config: PARENT/seed_<seed>."""
    return os.path.join(parent, f"seed_{seed}")


def group_seeds(workdir: str | os.PathLike) -> list[str]:
    """The seed runs (`seed_dir`s holding a config.json or checkpoints) a seed group trained in
    `workdir`, by directory name."""
    try:
        names = sorted(os.listdir(workdir))
    except OSError:
        return []
    return [
        name
        for name in names
        if name.startswith("seed_")
        and name[len("seed_") :].isdigit()
        and (
            os.path.exists(os.path.join(workdir, name, CONFIG_FILE))
            or has_checkpoints(os.path.join(workdir, name))
        )
    ]


def check_layout(workdir: str | os.PathLike, *, group: bool) -> None:
    """Refuses (ValueError) a run of its own in a seed group's directory and a seed group in a
    run's: the one would be trained beside the other and read in its place (`generate`)."""
    if group and (os.path.exists(os.path.join(workdir, CONFIG_FILE)) or has_checkpoints(workdir)):
        raise ValueError(
            f"--workdir={workdir} holds a run of its own; a seed group (--seeds) trains in a "
            "directory of its own: use a new --workdir"
        )
    seeds = group_seeds(workdir) if not group else []
    if seeds:
        raise ValueError(
            f"--workdir={workdir} holds a seed group ({', '.join(seeds)}); resume it with "
            "--seeds, or train a run of its own in a new --workdir"
        )


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """The outcome of a training run, as summary.json holds it.

    metrics: split -> metric -> value of the last evaluation (empty if none ran).
    tokens_per_sec: median training throughput of the logging windows of every process of a
      resumed run (up to the checkpoint each resumed from), less each process's first window,
      which includes compilation; None when there was no other window or the run did not finish.
    wall_time_s: seconds of training, summed over the processes of a resumed run (each killed
      process up to its last line kept in metrics.jsonl).
    error: why a diverged or failed run stopped; None otherwise.
    early_stop: runs with train.early_stop_metric: the criterion, the best value and its step,
      and stopped_step and reason when it stopped before train.steps
      (transformer_jax/train/early_stop.py); None otherwise.
    timing: seconds per phase of this process (startup, data, init, compile, train, eval,
      decode, checkpoint, other, total; transformer_jax/train/timing.py); None in summaries
      written before it existed.
    extras: evaluator name -> the fields it records (its `summary_fields`,
      transformer_jax/train/evaluators.py), e.g. "bleu": the test decoding settings, sacreBLEU
      signatures and translations file; summaries written before extras held "bleu" at the top
      level, which `from_json` reads into extras.
    """

    status: Status
    step: int
    metrics: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    num_params: int | None = None
    tokens_per_sec: float | None = None
    wall_time_s: float | None = None
    error: str | None = None
    early_stop: dict[str, Any] | None = None
    timing: dict[str, float | None] | None = None
    extras: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: Any) -> "RunSummary":
        """Parses `to_json`'s output; unknown fields (from newer code) are ignored, and the
        evaluator fields older summaries kept at the top level (`_EXTRAS_BEFORE`) move into
        extras."""
        if not isinstance(obj, Mapping) or "status" not in obj or "step" not in obj:
            raise ValueError(f"not a run summary (needs status and step): {obj!r:.200}")
        known = {field.name for field in dataclasses.fields(cls)}
        fields = {k: v for k, v in obj.items() if k in known}
        fields["metrics"] = fields.get("metrics") or {}
        extras = dict(fields.get("extras") or {})
        for name in _EXTRAS_BEFORE:
            if obj.get(name) is not None:
                extras.setdefault(name, obj[name])
        fields["extras"] = extras
        return cls(**fields)


# Evaluator fields that summaries written before RunSummary.extras held at the top level.
_EXTRAS_BEFORE = ("bleu",)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Writes `text` to `path` atomically: readers see the old file or the new one, never half."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | os.PathLike, content: bytes) -> None:
    """Writes `content` to `path` atomically (see `write_text`)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path), suffix=".tmp")
    try:
        # mkstemp creates 0600; give the file the mode `open` would (0666 less the umask, so
        # 0644 usually), so colleagues can read a shared run directory like its other files.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as error:
        os.unlink(tmp)
        if error.filename is not None:
            raise
        # A write to a full disk names no file: the error line must say which one failed.
        raise OSError(error.errno, error.strerror, path) from None
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Writes `obj` as indented JSON to `path` atomically (see `write_text`).

    numpy/jax scalars and arrays are converted with `.tolist()`.
    """
    write_text(path, json_text(obj))


def json_text(obj: Any) -> str:
    """`obj` as `write_json` writes it."""
    return json.dumps(obj, indent=2, default=lambda x: np.asarray(x).tolist()) + "\n"


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def read_checksums(workdir: str | os.PathLike) -> dict[str, Any]:
    """checksums.json ({} without one: a run written before records carried checksums); a
    damaged one is a ValueError naming it."""
    path = os.path.join(workdir, CHECKSUMS_FILE)
    if not os.path.exists(path):
        return {}
    record = read_json(path)
    if not isinstance(record, dict):
        raise ValueError(
            f"{path} is damaged (not a JSON object of checksums): the run's records cannot be "
            "verified; restore it from a copy of the run"
        )
    return record


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_recorded(workdir: str | os.PathLike, name: str, content: bytes, **entries: Any) -> None:
    """Writes `content` to workdir/name atomically with its SHA-256 in checksums.json (and the
    other `entries` there). The record first accepts the file's old bytes and the new ones,
    then only the new: a kill between the writes leaves a run that verifies."""
    path = os.path.join(workdir, name)
    record = {**read_checksums(workdir), **entries}
    old = _read_bytes(path)
    new = sha256(content)
    record[name] = [*([sha256(old)] if old is not None else []), new]
    write_json(os.path.join(workdir, CHECKSUMS_FILE), record)
    write_bytes(path, content)
    record[name] = [new]
    write_json(os.path.join(workdir, CHECKSUMS_FILE), record)


def record_checksum(workdir: str | os.PathLike, name: str, entry: Any) -> None:
    """Sets checksums.json's `name` entry (metrics.jsonl's `{"bytes", "sha256"}`)."""
    write_json(os.path.join(workdir, CHECKSUMS_FILE), {**read_checksums(workdir), name: entry})


def _tampered(path: str) -> ValueError:
    return ValueError(
        f"{path} does not match the SHA-256 its run's {CHECKSUMS_FILE} records (edited, "
        "swapped with another run's, or damaged); restore it from a copy of the run"
    )


def check_recorded(workdir: str | os.PathLike, name: str, content: bytes) -> None:
    """A ValueError naming workdir/name when checksums.json records other bytes for it; nothing
    when it records none (a run from before checksums)."""
    accepted = read_checksums(workdir).get(name)
    if isinstance(accepted, list) and sha256(content) not in accepted:
        raise _tampered(os.path.join(workdir, name))


def check_prefix(workdir: str | os.PathLike, name: str, entry: Any) -> None:
    """A ValueError naming workdir/name unless its first entry["bytes"] bytes hash to
    entry["sha256"] (an appended file: metrics.jsonl); nothing when `entry` is None."""
    if not isinstance(entry, dict):
        return
    path = os.path.join(workdir, name)
    content = _read_bytes(path) or b""
    size = entry.get("bytes")
    if (
        not isinstance(size, int)
        or len(content) < size
        or sha256(content[:size]) != entry.get("sha256")
    ):
        raise _tampered(path)


def check_metrics(workdir: str | os.PathLike) -> None:
    """metrics.jsonl against checksums.json (`check_prefix`)."""
    check_prefix(workdir, METRICS_FILE, read_checksums(workdir).get(METRICS_FILE))


def read_json(path: str | os.PathLike) -> Any | None:
    """Parsed JSON, or None when the file is absent or does not parse (e.g. cut short)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_config(workdir: str | os.PathLike, resolved: Mapping[str, Any]) -> None:
    """config.json: the resolved config and the git commit of the code about to run it."""
    write_json(os.path.join(workdir, CONFIG_FILE), {**resolved, GIT_COMMIT_KEY: git_commit()})


def read_config(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """config.json as written by `write_config` (with GIT_COMMIT_KEY), or None without one."""
    config = read_json(os.path.join(workdir, CONFIG_FILE))
    return config if isinstance(config, dict) else None


def read_run_config(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """config.json for a trainer or reader that acts on the run: None when the directory holds
    neither it nor a checkpoint (no run yet); a ValueError naming the file when it is damaged
    (cut short, empty, not an object) or missing beside checkpoints, since a resume checked
    against nothing could change any field and a reader would build another model. The
    checkpoints do not record the config, so it cannot be recovered from them."""
    path = os.path.join(workdir, CONFIG_FILE)
    try:
        return read_json_object(path, "the run's config", "use a new --workdir")
    except FileNotFoundError:
        if not has_checkpoints(workdir):
            return None
        raise ValueError(
            f"{path} is missing but {os.path.join(workdir, CHECKPOINT_DIR)} holds checkpoints: "
            f"without the run's config they cannot be checked or loaded; restore {CONFIG_FILE} "
            "from a copy, or use a new --workdir"
        ) from None


def read_json_object(path: str | os.PathLike, what: str, otherwise: str) -> dict[str, Any]:
    """The JSON object in `path`; FileNotFoundError when there is none, and a ValueError naming
    the file when it is damaged (cut short, empty, not UTF-8, not an object): `what` it should
    hold, and `otherwise`, the way out besides restoring it."""
    try:
        with open(path) as f:
            stored = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        stored = error
    if not isinstance(stored, dict):
        why = stored if isinstance(stored, Exception) else f"a JSON {type(stored).__name__}"
        raise ValueError(
            f"{path} is damaged ({why}; expected {what} as a JSON object): restore it from a "
            f"copy, or {otherwise}"
        )
    return stored


def has_checkpoints(workdir: str | os.PathLike) -> bool:
    """Whether the run directory holds a finished checkpoint (a step directory of
    CHECKPOINT_DIR; a save still in progress has another name)."""
    try:
        names = os.listdir(os.path.join(workdir, CHECKPOINT_DIR))
    except OSError:
        return False
    return any(name.isdigit() for name in names)


def record_resume(workdir: str | os.PathLike, step: int, changes: Mapping[str, Any]) -> None:
    """Appends the config changes of a resume at `step` to config.json's RESUMES_KEY list."""
    config = read_config(workdir)
    if config is None:
        raise ValueError(f"{workdir} holds no {CONFIG_FILE} to record a resume in")
    resume = {"step": int(step), GIT_COMMIT_KEY: git_commit(), "changes": dict(changes)}
    config[RESUMES_KEY] = [*config.get(RESUMES_KEY, []), resume]
    write_json(os.path.join(workdir, CONFIG_FILE), config)


def effective_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.json's config as the latest process ran it: the recorded resume changes applied,
    without GIT_COMMIT_KEY and RESUMES_KEY."""
    effective = {k: v for k, v in config.items() if k not in (GIT_COMMIT_KEY, RESUMES_KEY)}
    effective = json.loads(json.dumps(effective))  # A deep copy to apply the changes to.
    for resume in config.get(RESUMES_KEY, []):
        for dotted, change in resume["changes"].items():
            *parents, name = dotted.split(".")
            node = effective
            for parent in parents:
                node = node.setdefault(parent, {})
            node[name] = change["to"]
    return effective


def lock_run(workdir: str | os.PathLike) -> TextIO:
    """Takes the run directory's lock for this process (released when the returned file is
    closed or the process dies, even by SIGKILL); a ValueError if another process holds it,
    so two trainers never write one run directory at once."""
    path = os.path.join(workdir, LOCK_FILE)
    lock = open(path, "a+")  # noqa: SIM115 (held until the caller closes it)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise ValueError(
            f"workdir {workdir} is being trained by another process (pid {holder}); wait for "
            "it to finish or stop it, or use a new --workdir"
        ) from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def lock_holder(workdir: str | os.PathLike) -> int | None:
    """The pid of the live process that holds the run's lock (`lock_run`), or None: read from
    Linux's /proc/locks (never by trying the lock, which could refuse a trainer starting at that
    moment); None where /proc/locks does not exist."""
    path = os.path.join(workdir, LOCK_FILE)
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks") as f:
            table = f.read().splitlines()
    except OSError:
        return None
    for line in table:
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (pid, major:minor:inode)
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
            return int(fields[4])
    return None


def write_summary(
    workdir: str | os.PathLike, summary: RunSummary, metrics: Mapping[str, Any] | None = None
) -> None:
    """summary.json, its SHA-256 in checksums.json, with `metrics` (metrics.jsonl's `{"bytes",
    "sha256"}` as the summary closes it) beside it."""
    entries = {METRICS_FILE: dict(metrics)} if metrics is not None else {}
    write_recorded(workdir, SUMMARY_FILE, json_text(summary.to_json()).encode(), **entries)


def read_summary(workdir: str | os.PathLike) -> RunSummary | None:
    """summary.json of the run, or None if there is none; a ValueError naming it when its bytes
    are not those checksums.json records, or when it is damaged (cut short, not a summary): it
    is written atomically (`write_text`), so a half one was never the trainer's, and reading
    it as no summary would call a finished run interrupted and train it again."""
    path = os.path.join(workdir, SUMMARY_FILE)
    content = _read_bytes(path)
    if content is None:
        return None
    check_recorded(workdir, SUMMARY_FILE, content)
    try:
        return RunSummary.from_json(json.loads(content))
    except (ValueError, TypeError) as error:  # JSONDecodeError and UnicodeDecodeError too
        why = str(error).splitlines()[0][:120]
        raise ValueError(
            f"{path} is damaged ({why}; expected the run's summary, a JSON object with status "
            "and step): restore it from a copy of the run, or delete it to train the run's end "
            "again"
        ) from None


def code_label(version: Mapping[str, Any]) -> str:
    """One code version as text: the commit, then "+diff:<sha256>" when trained from
    uncommitted changes (code.json's entries, sweep/code_version.py)."""
    commit = str(version.get(GIT_COMMIT_KEY) or "unknown")
    diff, files = version.get("diff_sha256"), version.get("files_sha256")
    if files:  # no git could check it: the hash of the code's files
        return f"{commit}+files:{files}"
    return f"{commit}+diff:{diff}" if diff else commit


def record_code(workdir: str | os.PathLike, version: Mapping[str, Any]) -> None:
    """Appends `version` to the run's code.json unless it is the last one recorded (a resume at
    the same version)."""
    path = os.path.join(workdir, CODE_FILE)
    launches = read_code(workdir)
    if not launches or launches[-1] != dict(version):
        write_json(path, {"launches": [*launches, dict(version)]})


def read_code(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """The code versions of code.json, oldest first ([] without one)."""
    code = read_json(os.path.join(workdir, CODE_FILE))
    launches = code.get("launches") if isinstance(code, dict) else None
    return [v for v in launches if isinstance(v, dict)] if isinstance(launches, list) else []


def git_commit(cwd: str | os.PathLike | None = None) -> str:
    """`git rev-parse HEAD` (suffixed "-dirty" with uncommitted changes); "unknown" outside git.

    `cwd` defaults to this package's directory: the commit of the code that is running.
    """
    cwd = _PACKAGE_DIR if cwd is None else cwd
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=30
        )
        if head.returncode != 0:
            return "unknown"
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    commit = head.stdout.strip()
    return commit + "-dirty" if status.returncode == 0 and status.stdout.strip() else commit
