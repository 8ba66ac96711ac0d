"""A sweep's record of its runs: WORKDIR/runs.jsonl, what a committed results/ folder keeps of
its run directories (docs/sweeps.md, "The record of a sweep's runs").

One JSON object per line, one line per ended run (finished, diverged or failed), in sweep order:

    {"variant": "<run variant>", "seed": 0, "status": "finished",
     "files": {"config.json": "<its text>", "metrics.jsonl": "<its text>", ...}}

`files` holds every text file of the run directory, by its path relative to it, byte for byte
but for the machine's paths (below): config.json (the resolved config and the trainer's
commit), command.txt (the command, with its overrides), code.json (commit and diff hash of each
launch), summary.json, metrics.jsonl (the whole training and evaluation history),
failure.json, and what evaluators and analyses add (translations/, eval_positions/). Left
out: what is rebuilt or serves only a live run (`LEFT_OUT`: checkpoints, TensorBoard event
files, hparams.json, run.log, the tokenizer copies, locks) and binary files. `unpack` writes
the files back, so every reader of run directories (the report, its curves,
experiments/reports/) reads a recorded run as it read the original; `write_events` rebuilds
a run's TensorBoard scalars from its metrics.jsonl.

A record is committed, so it names no directory of the machine that wrote it: `entry` writes
each absolute path of the machine (`places`: the sweep's workdir, the checkout, the data files
environment variables name, the home and temporary directories) as its placeholder
(`<workdir>`, `<repo>`, `$TINY_SHAKESPEARE`, `<home>`, `<tmp>`), and `unpack` writes this
machine's paths back in their place (`machine_paths`), so a resumed or retried run reads a
config.json that names this machine's data directory (a resume compares data.data_dir,
train/resume.py).

The report writes the record (report/report.py) from the run directories, keeping the recorded
runs whose directories are gone; a sweep started in a folder with a record first unpacks the
runs it lacks (sweep/runner.py), so they are not trained again.
"""

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from transformer_jax import run_dir as run_files

RECORD_FILE = "runs.jsonl"
RECORDED_STATUSES = ("finished", "diverged", "failed")
# Names (files or directories, at any depth of a run directory) the record leaves out.
LEFT_OUT = (
    run_files.CHECKPOINT_DIR,
    run_files.HPARAMS_FILE,  # rewritten by the report (sweep/hparams.py)
    run_files.LOG_FILE,  # the console output; failure.json keeps a failed run's stderr tail
    run_files.TOKENIZER_FILE,  # rebuilt from the data; needed only beside a checkpoint
    run_files.TOKENIZER_MODEL_FILE,
    run_files.LOCK_FILE,
    run_files.PROFILE_DIR,
    "wandb",
)
_EVENTS_PREFIX = "events.out.tfevents."
# Environment variables naming a data file a config reads (configs/shakespeare_char.py).
DATA_VARIABLES = ("TINY_SHAKESPEARE",)
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Entry = dict[str, Any]  # one line of the record


def machine_paths(workdir: str) -> dict[str, str]:
    """Placeholder -> this machine's absolute path, for each directory or file of the machine
    a record names by placeholder; an unset data variable, or a path that is `/`, left out."""
    found = {
        "<workdir>": os.path.abspath(workdir),
        "<repo>": _CHECKOUT,
        "<home>": os.path.expanduser("~"),
        "<tmp>": tempfile.gettempdir(),
    }
    for name in DATA_VARIABLES:
        if os.environ.get(name):
            found[f"${name}"] = os.path.abspath(os.path.expanduser(os.environ[name]))
    found = {mark: path.rstrip(os.sep) for mark, path in found.items()}
    return {mark: path for mark, path in found.items() if path}


def places(workdir: str) -> list[tuple[str, str]]:
    """(placeholder, path) of `machine_paths`, each also under its resolved name (a temporary
    directory behind a symbolic link), the longest path first: a workdir inside the checkout
    is `<workdir>`, not `<repo>/...`."""
    pairs = {
        (mark, p)
        for mark, path in machine_paths(workdir).items()
        for p in (path, os.path.realpath(path))
    }
    return sorted(pairs, key=lambda pair: (-len(pair[1]), pair[0]))


def scrub(text: str, known: list[tuple[str, str]]) -> str:
    """`text` with each path of `known` (`places`) written as its placeholder, where it is a
    whole path or its start (`/root` in `/root/x`, not in `/rootfs`)."""
    for mark, path in known:  # no placeholder holds a backslash, re.sub's one special
        text = re.sub(re.escape(path) + r"(?![\w.-])", mark, text)
    return text


def restore(text: str, paths: Mapping[str, str]) -> str:
    """`text` with each placeholder of `paths` (`machine_paths`) written as its path."""
    for mark, path in paths.items():
        text = text.replace(mark, path)
    return text


def _kept(name: str) -> bool:
    return (
        name not in LEFT_OUT and not name.startswith(_EVENTS_PREFIX) and not name.endswith(".tmp")
    )


def entry(path: str, variant: str, seed: int, status: str, workdir: str) -> Entry:
    """The record line of the run directory `path` of (variant, seed), ended with `status`, in
    the sweep directory `workdir`; the machine's paths written as placeholders (`places`), the
    sweep directory the run trained in among them when that was elsewhere (`trained_in`)."""
    known = places(workdir)
    earlier = trained_in(path, variant, seed)
    if earlier is not None:
        known = sorted({*known, ("<workdir>", earlier)}, key=lambda p: (-len(p[1]), p[0]))
    files = {}
    for parent, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if _kept(d))
        for name in sorted(filter(_kept, names)):
            full = os.path.join(parent, name)
            with open(full, "rb") as f:
                content = f.read()
            with contextlib.suppress(UnicodeDecodeError):  # binary files are left out
                text = scrub(content.decode("utf-8"), known)
                files[os.path.relpath(full, path).replace(os.sep, "/")] = text
    return {"variant": variant, "seed": seed, "status": status, "files": files}


def trained_in(path: str, variant: str, seed: int) -> str | None:
    """The absolute sweep directory that the run at `path` trained in, as its command.txt
    names it (`--workdir=<that>/<variant>/seed_<seed>`); None when it names a relative one or
    none. A sweep directory copied or moved after its runs trained still has their commands
    name the old place, which is a machine's path too."""
    try:
        with open(os.path.join(path, "command.txt"), encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    suffix = re.escape(f"/{variant}/seed_{seed}")
    found = re.findall(r"--workdir=(/[^\s'\"]*?)" + suffix + r"(?![\w.-])", text)
    return found[-1].rstrip(os.sep) if found else None


def record_path(workdir: str) -> str:
    return os.path.join(workdir, RECORD_FILE)


def read_record(workdir: str) -> dict[tuple[str, int], Entry]:
    """(run variant, seed) -> its line of WORKDIR/runs.jsonl; {} when there is none. A line that
    is not a record entry is a ValueError naming the file and line."""
    path = record_path(workdir)
    if not os.path.isfile(path):
        return {}
    entries: dict[tuple[str, int], Entry] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key = (item["variant"], int(item["seed"]))
                if item["status"] not in RECORDED_STATUSES or not isinstance(item["files"], dict):
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                raise ValueError(
                    f"{path}:{number}: not a run of the record (a JSON object with variant, "
                    f"seed, status one of {', '.join(RECORDED_STATUSES)}, and files)"
                ) from None
            if key in entries:
                raise ValueError(f"{path}:{number}: {key[0]}/seed_{key[1]} is recorded twice")
            entries[key] = item
    return entries


def write_record(workdir: str, entries: Iterable[Entry]) -> None:
    """Writes WORKDIR/runs.jsonl atomically, one line per entry in the given order."""
    lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in entries]
    run_files.write_text(record_path(workdir), "".join(lines))


def unpack(item: Entry, path: str, workdir: str) -> None:
    """Writes the recorded files of `item` into the run directory `path` of the sweep directory
    `workdir`, the placeholders written as this machine's paths (`places`)."""
    paths = machine_paths(workdir)
    for name, text in item["files"].items():
        target = os.path.join(path, *name.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        run_files.write_text(target, restore(text, paths))


def missing_runs(workdir: str, record: Mapping[tuple[str, int], Entry]) -> list[tuple[str, int]]:
    """The recorded runs whose run directory WORKDIR lacks."""
    return [
        key
        for key in record
        if not os.path.exists(run_files.seed_dir(os.path.join(workdir, key[0]), key[1]))
    ]


def unpack_missing(workdir: str, record: Mapping[tuple[str, int], Entry]) -> list[str]:
    """Unpacks the recorded runs WORKDIR lacks into their run directories; returns, for each,
    the outermost directory it created (removing those removes what was unpacked)."""
    created = []
    for variant, seed in missing_runs(workdir, record):
        path = run_files.seed_dir(os.path.join(workdir, variant), seed)
        outermost = path
        while not os.path.exists(os.path.dirname(outermost)):
            outermost = os.path.dirname(outermost)
        unpack(record[(variant, seed)], path, workdir)
        if outermost not in created:
            created.append(outermost)
    return created


@contextlib.contextmanager
def unpacked(workdir: str) -> Iterator[dict[tuple[str, int], Entry]]:
    """The recorded runs WORKDIR lacks, unpacked into their run directories while the block
    runs and removed after it (with whatever was written into them meanwhile, e.g. the
    report's HParams sessions); yields the record."""
    record = read_record(workdir)
    created = unpack_missing(workdir, record)
    try:
        yield record
    finally:
        for path in reversed(created):
            shutil.rmtree(path, ignore_errors=True)


def write_events(path: str) -> int:
    """Writes a TensorBoard event file of the scalars in the run directory's metrics.jsonl, as
    the trainer logged them (`<split>/<metric>` at each step); returns how many (0 for a run
    that ended before logging any)."""
    metrics_path = os.path.join(path, run_files.METRICS_FILE)
    if not os.path.isfile(metrics_path):
        return 0
    # Here, not at the top: tensorboardX is needed only by this command.
    from transformer_jax.train.event_file import EventFile

    events, count = EventFile(path, None), 0
    try:
        with open(metrics_path) as f:
            for line in f:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill, as read_curve skips it
                for name, value in event.items():
                    if name not in ("step", "split", "time") and isinstance(value, int | float):
                        events.add_scalar(f"{event['split']}/{name}", float(value), event["step"])
                        count += 1
    finally:
        events.close()
    return count
