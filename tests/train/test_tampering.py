"""Tamper-evident records: summary.json, metrics.jsonl and tokenizer.json carry their SHA-256 in
the run's checksums.json (metrics.jsonl's also in each checkpoint), and the report, a resume
and generate's loader refuse a file whose bytes differ, in one error naming it; a run
interrupted between writes still verifies."""

import json
import os
import re
import shutil

import pytest
from test_vocabulary import CORPUS, char_lm_config

from transformer_jax import run_dir, sweep_dir
from transformer_jax.run_dir import CHECKSUMS_FILE, METRICS_FILE, SUMMARY_FILE, TOKENIZER_FILE
from transformer_jax.train.restore import load_run
from transformer_jax.train.trainer import train_and_evaluate


@pytest.fixture(scope="module")
def trained_once(tmp_path_factory):
    """A char-LM run trained 4 steps (test_vocabulary.py's): (config, its directory)."""
    root = tmp_path_factory.mktemp("char_lm")
    (root / "corpus.txt").write_text(CORPUS)
    config = char_lm_config(root / "tfds", root / "corpus.txt")
    train_and_evaluate(config, str(root / "run"))
    return config, root / "run"


@pytest.fixture
def trained(trained_once, tmp_path):
    """A copy of the trained run for one test (tests edit it): (config, its directory)."""
    config, workdir = trained_once
    shutil.copytree(workdir, tmp_path / "run")
    return config.copy_and_resolve_references(), tmp_path / "run"


def _refused(path):
    return pytest.raises(ValueError, match=re.escape(f"{path} does not match the SHA-256"))


def _as_sweep_run(workdir):
    """The trained run as seed 0 of variant "base" of a sweep directory: (sweep dir, run)."""
    sweep = workdir.parent / "sweep"
    os.makedirs(sweep / "base")
    os.rename(workdir, sweep / "base" / "seed_0")
    return sweep, sweep / "base" / "seed_0"


def test_the_trained_run_verifies_and_records_every_file(trained):
    _, workdir = trained
    record = json.loads((workdir / CHECKSUMS_FILE).read_text())
    assert sorted(record) == [METRICS_FILE, SUMMARY_FILE, TOKENIZER_FILE]
    assert record[METRICS_FILE]["bytes"] == (workdir / METRICS_FILE).stat().st_size
    sweep, _ = _as_sweep_run(workdir)
    assert sweep_dir.read_run(str(sweep), "base", 0).status == "finished"


def test_an_edited_or_swapped_summary_is_refused_by_the_report(trained):
    _, workdir = trained
    sweep, run = _as_sweep_run(workdir)
    path = run / SUMMARY_FILE
    summary = json.loads(path.read_text())
    original = path.read_bytes()
    split = next(iter(summary["metrics"]))
    summary["metrics"][split]["loss"] = 0.001  # an edited loss
    path.write_text(json.dumps(summary, indent=2) + "\n")
    with _refused(path):
        sweep_dir.read_run(str(sweep), "base", 0)
    # Another run's summary (its own checksums.json records it) in this run's place.
    other = sweep / "other"
    other.mkdir()
    run_dir.write_summary(other, run_dir.RunSummary("finished", 4, {"test": {"loss": 9.0}}))
    path.write_bytes((other / SUMMARY_FILE).read_bytes())
    with _refused(path):
        sweep_dir.read_run(str(sweep), "base", 0)
    path.write_bytes(original)
    assert sweep_dir.read_run(str(sweep), "base", 0).status == "finished"


@pytest.mark.parametrize("change", ["edited", "swapped", "cut short"])
def test_a_changed_summary_is_refused_by_a_resume_and_kept(trained, tmp_path, change):
    """A solo run's resume reads its summary.json as a group's does: an edited one, another
    run's or one cut short (recorded or not) is refused by name before anything is written,
    never replaced by the re-evaluated summary (which would hide that the record changed)."""
    config, workdir = trained
    path = workdir / SUMMARY_FILE
    if change == "edited":
        summary = json.loads(path.read_text())
        summary["metrics"][next(iter(summary["metrics"]))]["loss"] = 0.001
        path.write_text(json.dumps(summary, indent=2) + "\n")
    elif change == "swapped":
        run_dir.write_summary(tmp_path, run_dir.RunSummary("finished", 4, {"test": {"loss": 9.0}}))
        path.write_bytes((tmp_path / SUMMARY_FILE).read_bytes())
    else:  # in a run from before checksums: no record to compare it with
        path.write_bytes(path.read_bytes()[:40])
        (workdir / CHECKSUMS_FILE).unlink()
    before = {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()}
    match = "is damaged" if change == "cut short" else "does not match the SHA-256"
    with pytest.raises(ValueError, match=re.escape(f"{path} ") + match):
        train_and_evaluate(config, str(workdir))
    assert {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()} == before


def test_an_edited_metrics_line_is_refused_by_the_report_and_a_resume(trained):
    config, workdir = trained
    path = workdir / METRICS_FILE
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["loss"] = first["loss"] / 2
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with _refused(path):
        train_and_evaluate(config, str(workdir))  # a resume (here at the run's end)
    sweep, run = _as_sweep_run(workdir)
    with _refused(run / METRICS_FILE):
        sweep_dir.read_run(str(sweep), "base", 0)


def test_a_permuted_alphabet_is_refused_by_generate_and_a_resume(trained):
    config, workdir = trained
    path = workdir / TOKENIZER_FILE
    spec = json.loads(path.read_text())
    spec["alphabet"] = spec["alphabet"][1] + spec["alphabet"][0] + spec["alphabet"][2:]
    path.write_text(json.dumps(spec))
    with _refused(path):
        load_run(str(workdir))  # what generate and the analyses read the run with
    with _refused(path):
        train_and_evaluate(config, str(workdir))


class _Killed(BaseException):
    pass


def test_a_kill_between_a_records_two_writes_leaves_a_run_that_verifies(tmp_path, monkeypatch):
    """summary.json rewritten: the record accepts the old and the new bytes first, then only
    the new; killed before the file is replaced, the old summary still verifies."""
    old = run_dir.RunSummary("failed", 5, error="No space left on device")
    run_dir.write_summary(tmp_path, old)
    write_bytes = run_dir.write_bytes

    def killed_writing_the_summary(path, content):
        if os.path.basename(path) == SUMMARY_FILE:
            raise _Killed
        write_bytes(path, content)

    monkeypatch.setattr(run_dir, "write_bytes", killed_writing_the_summary)
    with pytest.raises(_Killed):
        run_dir.write_summary(tmp_path, run_dir.RunSummary("finished", 10))
    monkeypatch.undo()
    assert run_dir.read_summary(tmp_path) == old
    run_dir.write_summary(tmp_path, run_dir.RunSummary("finished", 10))
    assert run_dir.read_summary(tmp_path).status == "finished"
    assert len(json.loads((tmp_path / CHECKSUMS_FILE).read_text())[SUMMARY_FILE]) == 1
