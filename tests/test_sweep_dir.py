"""Run-directory reading: status classification and learning-curve parsing."""

import json
import math
import os

import pytest
from run_dir_fixtures import write_run

from transformer_jax import sweep_dir


def test_status_classification(tmp_path):
    write_run(tmp_path, "v", 0, "finished", {"test": {"seq_accuracy": 0.9}})
    write_run(tmp_path, "v", 1, "diverged")
    write_run(tmp_path, "v", 2, "failed")
    write_run(tmp_path, "v", 3, "incomplete")
    statuses = [sweep_dir.read_run(str(tmp_path), "v", s).status for s in range(5)]
    assert statuses == ["finished", "diverged", "failed", "incomplete", "missing"]

    finished = sweep_dir.read_run(str(tmp_path), "v", 0)
    assert finished.metric("test/seq_accuracy") == 0.9
    assert finished.metric("test/token_accuracy") is None
    assert finished.num_params == 12345 and finished.git_commit == "abc123"
    assert sweep_dir.read_run(str(tmp_path), "v", 2).error == "RuntimeError: boom"


def test_summary_takes_precedence_and_a_cut_short_summary_is_damaged(tmp_path):
    # A retried run that then finished keeps an old failure.json only if the runner failed to
    # delete it; summary.json still decides.
    path = write_run(tmp_path, "v", 0, "finished")
    with open(os.path.join(path, "failure.json"), "w") as f:
        json.dump({"returncode": 1}, f)
    assert sweep_dir.read_run(str(tmp_path), "v", 0).status == "finished"
    # summary.json is written atomically (run_dir.write_text), so a kill cannot cut it short:
    # a cut-short one is damaged, named, not an interrupted run to train again.
    path = write_run(tmp_path, "v", 1, "finished")
    with open(os.path.join(path, "summary.json"), "r+") as f:
        f.truncate(len(f.read()) // 2)
    with pytest.raises(ValueError, match=r"^\S*v/seed_1/summary.json is damaged \(") as caught:
        sweep_dir.read_run(str(tmp_path), "v", 1)
    assert "\n" not in str(caught.value)


def test_metric_names_split_at_first_slash(tmp_path):
    write_run(tmp_path, "v", 0, "finished", {"test": {"attention_entropy/layer_0": 1.5}})
    assert sweep_dir.read_run(str(tmp_path), "v", 0).metric("test/attention_entropy/layer_0") == 1.5


def test_read_curve_keeps_last_value_per_step_and_skips_torn_lines(tmp_path):
    path = write_run(tmp_path, "v", 0, "incomplete", losses=(3.0, 2.0, 1.0))
    with open(os.path.join(path, "metrics.jsonl"), "a") as f:
        # Resumed from the step-10 checkpoint: steps 10 and 20 are logged again.
        f.write(json.dumps({"step": 10, "split": "train", "time": 5.0, "loss": 1.9}) + "\n")
        f.write(json.dumps({"step": 20, "split": "train", "time": 6.0, "loss": float("nan")}))
        f.write('\n{"step": 30, "spl')  # killed mid-write
    steps, losses = sweep_dir.read_curve(path, "train", "loss")
    assert steps == [0, 10, 20]
    assert losses[:2] == [3.0, 1.9] and math.isnan(losses[2])
    assert sweep_dir.read_curve(path, "test", "loss") == ([], [])
    assert sweep_dir.read_curve(str(tmp_path / "nowhere"), "train", "loss") == ([], [])


@pytest.mark.parametrize("text", ["", "garbage", '{"config": "x"', "[1]"])
def test_a_damaged_sweep_json_is_an_error_naming_it(tmp_path, text):
    path = tmp_path / sweep_dir.SWEEP_FILE
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path} is damaged"):
        sweep_dir.read_sweep_json(str(tmp_path))
    with pytest.raises(ValueError, match=f"{path} is damaged"):
        sweep_dir.update_sweep_json(str(tmp_path), {"config": "c"}, "s.py", "c.py", False, "m")
    assert path.read_text() == text
