"""The run-directory contract: atomic JSON, the typed summary, config.json and the git commit."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax import run_dir


def test_write_json_is_atomic_and_converts_numpy(tmp_path):
    path = tmp_path / run_dir.SUMMARY_FILE
    run_dir.write_json(path, {"status": "finished", "loss": np.float32(0.5), "n": jnp.int32(3)})
    run_dir.write_json(path, {"status": "finished", "step": np.int64(7)})
    with open(path) as f:
        assert json.load(f) == {"status": "finished", "step": 7}
    assert os.listdir(tmp_path) == ["summary.json"]  # no tmp files left behind


def test_written_files_have_the_mode_of_ordinary_files(tmp_path):
    """Not mkstemp's 0600: a colleague reading a shared sweep must be able to open them."""
    previous = os.umask(0o022)
    try:
        run_dir.write_text(tmp_path / "metrics.jsonl", "{}\n")
        run_dir.write_config(tmp_path, {"seed": 0})
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(previous)
    for name in ("metrics.jsonl", "config.json", "plain.txt"):
        assert oct(os.stat(tmp_path / name).st_mode & 0o777) == oct(0o644), name


def test_summary_round_trips_and_reads_what_earlier_code_wrote(tmp_path):
    summary = run_dir.RunSummary(
        status="finished",
        step=60,
        metrics={"test": {"loss": 0.25, "seq_accuracy": 1.0}},
        num_params=1234,
        tokens_per_sec=np.float64(5e3),
        wall_time_s=12.5,
    )
    run_dir.write_summary(tmp_path, summary)
    assert run_dir.read_summary(tmp_path) == summary
    # summary.json as the trainer wrote it by hand before RunSummary (and before checksums.json),
    # plus a field from the future.
    (tmp_path / run_dir.CHECKSUMS_FILE).unlink()
    written_before = {
        "status": "diverged",
        "step": 20,
        "metrics": {},
        "num_params": 99,
        "tokens_per_sec": None,
        "wall_time_s": 1.0,
        "error": "loss is nan at step 20",
        "added_later": True,
    }
    (tmp_path / "summary.json").write_text(json.dumps(written_before))
    expected = run_dir.RunSummary("diverged", 20, {}, 99, None, 1.0, "loss is nan at step 20")
    assert run_dir.read_summary(tmp_path) == expected


def test_evaluator_fields_round_trip_in_extras_and_a_top_level_bleu_is_read_into_them(tmp_path):
    bleu = {"beam_size": 4, "beam_alpha": 0.6, "translations": "translations/test.txt"}
    summary = run_dir.RunSummary("finished", 60, extras={"bleu": bleu, "examples": {"n": 3}})
    run_dir.write_summary(tmp_path, summary)
    assert run_dir.read_summary(tmp_path) == summary
    # summary.json as written before extras (and checksums.json): "bleu" at the top level, null
    # without BLEU.
    (tmp_path / run_dir.CHECKSUMS_FILE).unlink()
    before = {"status": "finished", "step": 60, "metrics": {}, "bleu": bleu, "timing": None}
    (tmp_path / "summary.json").write_text(json.dumps(before))
    assert run_dir.read_summary(tmp_path).extras == {"bleu": bleu}
    (tmp_path / "summary.json").write_text(json.dumps({**before, "bleu": None}))
    assert run_dir.read_summary(tmp_path).extras == {}
    assert "bleu" not in run_dir.read_summary(tmp_path).to_json()


def test_read_summary_is_none_without_one(tmp_path):
    assert run_dir.read_summary(tmp_path) is None


@pytest.mark.parametrize("text", ['{"status": "fini', "[1, 2]", '{"step": 3}', "", "\xff"])
def test_a_damaged_summary_is_refused_naming_the_file(tmp_path, text):
    """Cut short, empty, not a summary, not UTF-8: damaged, not a run that never ended."""
    (tmp_path / "summary.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=r"summary.json is damaged \(") as caught:
        run_dir.read_summary(tmp_path)
    assert str(tmp_path / "summary.json") in str(caught.value)
    assert "\n" not in str(caught.value)


def test_config_records_the_git_commit(tmp_path):
    assert run_dir.read_config(tmp_path) is None
    run_dir.write_config(tmp_path, {"seed": 3})
    config = run_dir.read_config(tmp_path)
    assert config["seed"] == 3 and config[run_dir.GIT_COMMIT_KEY] == run_dir.git_commit()


def test_git_commit_outside_a_repository_is_unknown(tmp_path):
    assert run_dir.git_commit(str(tmp_path)) == "unknown"


def test_messages_show_a_run_inside_the_working_directory_relative_to_it(tmp_path, monkeypatch):
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    assert run_dir.shown(tmp_path / "project" / "runs" / "copy") == os.path.join("runs", "copy")
    assert run_dir.shown("runs/copy") == os.path.join("runs", "copy")
    # A sibling whose name starts with the working directory's is outside it.
    assert run_dir.shown(tmp_path / "project_b" / "run") == str(tmp_path / "project_b" / "run")


@pytest.mark.parametrize("text", ['{"seed": 3', "", "[1, 2]", b"\xff\xfe"])
def test_a_damaged_config_json_is_an_error_naming_it(tmp_path, text):
    path = tmp_path / run_dir.CONFIG_FILE
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=f"{path} is damaged"):
        run_dir.read_run_config(tmp_path)


def test_a_missing_config_json_is_no_run_unless_checkpoints_are_there(tmp_path):
    assert run_dir.read_run_config(tmp_path) is None
    (tmp_path / run_dir.CHECKPOINT_DIR / "3.orbax-checkpoint-tmp-1").mkdir(parents=True)
    assert run_dir.read_run_config(tmp_path) is None  # a save in progress is no checkpoint
    (tmp_path / run_dir.CHECKPOINT_DIR / "2").mkdir()
    with pytest.raises(ValueError, match=f"{tmp_path / run_dir.CONFIG_FILE} is missing"):
        run_dir.read_run_config(tmp_path)
    run_dir.write_config(tmp_path, {"seed": 3})
    assert run_dir.read_run_config(tmp_path)["seed"] == 3
