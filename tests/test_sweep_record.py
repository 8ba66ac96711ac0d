"""The record of a sweep's runs (transformer_jax/sweep_record.py, runs.jsonl): run directories
packed and unpacked byte for byte, a committed folder's report rebuilt from its record alone,
and a rebuilt report that would list fewer finished runs than the one it replaces refused."""

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from transformer_jax import sweep_dir, sweep_record
from transformer_jax.report.report import write_report

REPO = Path(__file__).resolve().parents[1]
# A committed sweep of 5 runs with curves, read again at random offsets (eval_positions/).
COMMITTED = REPO / "results" / "universal_table4_t2t_warmup" / "copy"


def _write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)


def test_a_run_directory_comes_back_byte_for_byte_without_what_is_rebuilt(tmp_path):
    run = tmp_path / "run"
    kept = {
        "config.json": '{\n  "seed": 0\n}\n',
        "metrics.jsonl": '{"step": 1, "split": "train", "loss": NaN}\n',
        "translations/test.txt": "ein Hund\n",
        "eval_positions/step_offset.json": "{}",
    }
    for name, text in kept.items():
        _write(run / name, text)
    for name in ("run.log", "hparams.json", "tokenizer.json", "checkpoints/1/state"):
        _write(run / name, "rebuilt or live-only")
    _write(run / "events.out.tfevents.1.host", b"\x00\x01")
    _write(run / "blob.bin", b"\xff\xfe\x00")  # not text: left out
    item = sweep_record.entry(str(run), "a/lr-0.1", 0, "finished", str(tmp_path))
    assert item["files"] == dict(sorted(kept.items()))
    sweep_record.write_record(str(tmp_path), [item])
    assert sweep_record.read_record(str(tmp_path)) == {("a/lr-0.1", 0): item}
    sweep_record.unpack(item, str(tmp_path / "back"), str(tmp_path))
    for name, text in kept.items():
        assert (tmp_path / "back" / name).read_bytes() == text.encode()
    assert sorted(p.name for p in (tmp_path / "back").rglob("*") if p.is_file()) == sorted(
        Path(n).name for n in kept
    )


# An absolute path of a machine: what a committed record must not name (tests/test_docs.py).
MACHINE_PATH = re.compile(r"(?<![\w.~<>$])/(?:work|home|root|tmp|Users|var|private)/\S*")


def _machine_paths(item: dict) -> list[str]:
    return [
        f"{name}: {m}" for name, text in item["files"].items() for m in MACHINE_PATH.findall(text)
    ]


def test_the_machine_paths_of_a_run_are_placeholders_and_come_back_as_this_machines(
    tmp_path, monkeypatch
):
    """The workdir, the checkout, an environment-provided data file, the home and temporary
    directories; unpacked into another workdir, its own paths."""
    data = tmp_path / "data" / "input.txt"
    monkeypatch.setenv("TINY_SHAKESPEARE", str(data))
    workdir, home = tmp_path / "sweep", os.path.expanduser("~")
    run = workdir / "a" / "seed_0"
    config = {"data": {"path": str(data), "data_dir": f"{home}/tensorflow_datasets"}}
    _write(run / "config.json", json.dumps(config))
    _write(run / "command.txt", f"cd {REPO} && python -m transformer_jax.main --workdir={run}\n")
    stderr = f"File {REPO}/transformer_jax/main.py\nlog in {tempfile.gettempdir()}/x.log\n"
    _write(run / "failure.json", json.dumps({"stderr_tail": stderr}))
    item = sweep_record.entry(str(run), "a", 0, "failed", str(workdir))
    assert not _machine_paths(item), _machine_paths(item)
    assert json.loads(item["files"]["config.json"]) == {
        "data": {"path": "$TINY_SHAKESPEARE", "data_dir": "<home>/tensorflow_datasets"}
    }
    command = "cd <repo> && python -m transformer_jax.main --workdir=<workdir>/a/seed_0\n"
    assert item["files"]["command.txt"] == command
    assert json.loads(item["files"]["failure.json"])["stderr_tail"] == (
        "File <repo>/transformer_jax/main.py\nlog in <tmp>/x.log\n"
    )
    other = tmp_path / "elsewhere"
    sweep_record.unpack(item, str(other / "a" / "seed_0"), str(other))
    back = (other / "a" / "seed_0" / "command.txt").read_text()
    assert back == f"cd {REPO} && python -m transformer_jax.main --workdir={other}/a/seed_0\n"
    assert json.loads((other / "a" / "seed_0" / "config.json").read_text()) == config
    # A path that only starts like one is left alone: /rootfs is not under /root.
    known = [("<home>", "/root")]
    assert sweep_record.scrub("/rootfs /root /root/x", known) == "/rootfs <home> <home>/x"


def test_the_record_of_a_run_trained_in_a_temporary_workdir_names_no_temporary_path(tmp_path):
    """A run trained under the temporary directory, its data built inside its sweep directory:
    the record names neither, and a run retried from it on another machine (here: another
    workdir) reads its own data directory, which a resume compares (train/resume.py)."""
    from tiny_configs import tiny_copy_config

    from transformer_jax import run_dir
    from transformer_jax.train.resume import resume_changes
    from transformer_jax.train.trainer import train_and_evaluate

    workdir = tmp_path / "sweep"
    config = tiny_copy_config(workdir / "tfds", 2, log_every=1, eval_every=2, checkpoint_every=2)
    run = workdir / "a" / "seed_0"
    train_and_evaluate(config, str(run))
    item = sweep_record.entry(str(run), "a", 0, "finished", str(workdir))
    texts = "".join(item["files"].values())
    assert str(tmp_path) not in texts and tempfile.gettempdir() + "/" not in texts
    assert not _machine_paths(item), _machine_paths(item)
    assert json.loads(item["files"]["config.json"])["data"]["data_dir"] == "<workdir>/tfds"
    other = tmp_path / "elsewhere"
    sweep_record.unpack(item, str(other / "a" / "seed_0"), str(other))
    moved = tiny_copy_config(other / "tfds", 2, log_every=1, eval_every=2, checkpoint_every=2)
    resolved = json.loads((run / "config.json").read_text())
    resolved["data"]["data_dir"] = moved.data.data_dir
    assert resume_changes(other / "a" / "seed_0", resolved) == {}
    stored = run_dir.read_run_config(other / "a" / "seed_0")
    assert stored["data"]["data_dir"] == str(other / "tfds")


def test_a_run_recorded_after_its_sweep_directory_moved_names_the_old_place_as_its_workdir(
    tmp_path,
):
    """Runs trained in /old/place (an absolute --workdir), their directory copied elsewhere
    before the record is written: the commands' old paths are `<workdir>` too, and come back
    as the new place; a relative --workdir is left as it is."""
    variant, seed = "learned/confirm/lr-0.02", 14
    run = tmp_path / "sweep" / variant / f"seed_{seed}"
    run.mkdir(parents=True)
    lines = [
        "JAX_COMPILATION_CACHE_DIR=/old/place/.compile_cache python -m transformer_jax.main "
        f"--workdir=/old/place/{variant}/seed_{seed} --config.seed={seed}",
        f"python -m transformer_jax.main --workdir=runs/x/{variant}/seed_{seed}",
    ]
    for line, expected in zip(lines, ("/old/place", None), strict=True):
        (run / "command.txt").write_text(f"# sweep run\n{line}\n")
        assert sweep_record.trained_in(str(run), variant, seed) == expected
    (run / "command.txt").write_text(f"# sweep run\n{lines[0]}\n")
    item = sweep_record.entry(str(run), variant, seed, "finished", str(tmp_path / "sweep"))
    assert "/old/place" not in item["files"]["command.txt"]
    assert f"--workdir=<workdir>/{variant}/seed_{seed}" in item["files"]["command.txt"]
    sweep_record.unpack(
        item, str(tmp_path / "new" / variant / f"seed_{seed}"), str(tmp_path / "new")
    )
    back = (tmp_path / "new" / variant / f"seed_{seed}" / "command.txt").read_text()
    assert f"{tmp_path / 'new'}/.compile_cache" in back


def test_a_bad_record_line_names_file_and_line(tmp_path):
    (tmp_path / "runs.jsonl").write_text('{"variant": "a", "seed": 0, "status": "done"}\n')
    with pytest.raises(ValueError, match=r"runs.jsonl:1: not a run of the record"):
        sweep_record.read_record(str(tmp_path))


@pytest.fixture(scope="module")
def committed_copy(tmp_path_factory):
    """A copy of the committed folder, its report rebuilt (it holds no run directories)."""
    copy = tmp_path_factory.mktemp("committed") / "copy"
    shutil.copytree(COMMITTED, copy)
    write_report(str(copy))
    return copy


def test_a_committed_folder_rebuilds_its_report_from_its_record_alone(committed_copy):
    for name in ("runs.csv", "results.csv", "table.tex", "runs.jsonl"):
        assert (committed_copy / name).read_text() == (COMMITTED / name).read_text(), name
    report = (committed_copy / "report.md").read_text()
    finished = (COMMITTED / "runs.csv").read_text().count(",finished,")
    assert finished == 5 and report.count("| finished |") == finished  # the Runs table
    assert "rebuilt from" not in report  # the curves were redrawn from the record's metrics
    # The unpacked run directories (and the HParams sessions written into them) are gone.
    assert sorted(p.name for p in committed_copy.iterdir() if p.is_dir()) == sorted(
        p.name for p in COMMITTED.iterdir() if p.is_dir()
    )


def test_its_runs_read_as_they_trained_and_give_their_tensorboard_scalars(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(COMMITTED, copy)
    record = sweep_record.read_record(str(copy))
    assert sweep_record.unpack_missing(str(copy), record)
    (variant, seed), item = next(iter(record.items()))
    run = sweep_dir.read_run(str(copy), variant, seed)
    summary = json.loads(item["files"]["summary.json"])
    assert run.status == item["status"] == summary["status"] and run.step == summary["step"]
    lines = [json.loads(line) for line in item["files"]["metrics.jsonl"].splitlines()]
    scalars = sum(len(set(line) - {"step", "split", "time"}) for line in lines)
    assert sweep_record.write_events(run.path) == scalars
    assert list(Path(run.path).glob("events.out.tfevents.*"))


def test_a_rebuilt_report_with_fewer_finished_runs_is_refused_unless_forced(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(COMMITTED, copy)
    lines = (copy / "runs.jsonl").read_text().splitlines(keepends=True)
    (copy / "runs.jsonl").write_text("".join(lines[:-1]))  # one recorded run lost
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match=r"would list 4 finished runs where .*runs.csv lists 5"):
        write_report(str(copy))
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before
    write_report(str(copy), force=True)
    assert (copy / "runs.csv").read_text().count(",finished,") == 4
    assert not os.path.exists(copy / "transformer" / "seed_0")
