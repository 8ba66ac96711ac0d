"""reread_positions: a run's evaluation again at other positions, checked against the trainer's
own figures at plain positions, and reproducible per seed at random ones."""

import json
import subprocess
import sys

import pytest

from transformer_jax import run_dir
from transformer_jax.analysis import reread_positions
from transformer_jax.train.restore import load_run


@pytest.fixture(scope="module")
def run(copy_workdir):
    return load_run(str(copy_workdir))


def test_plain_positions_give_the_trainers_final_metrics(run, copy_workdir):
    summary = json.loads((copy_workdir / run_dir.SUMMARY_FILE).read_text())["metrics"]
    again = reread_positions.reread(run, "plain")
    for split in ("test", "test_long"):
        for name in ("loss", "token_accuracy", "seq_accuracy"):
            assert again[split][name] == pytest.approx(summary[split][name], abs=1e-6)


def test_random_offsets_are_reproducible_per_seed_and_differ_from_plain(run):
    first = reread_positions.reread(run, "batch_offset", splits=["test"])
    assert reread_positions.reread(run, "batch_offset", splits=["test"]) == first
    plain = reread_positions.reread(run, "plain", splits=["test"])["test"]["loss"]
    draws = [
        reread_positions.reread(run, "batch_offset", splits=["test"], draw_seed=s)["test"]["loss"]
        for s in range(4)
    ]
    assert any(abs(loss - plain) > 1e-6 for loss in draws)
    assert len({round(loss, 6) for loss in draws}) > 1  # other seeds draw other offsets


def test_command_line_writes_the_reading(copy_workdir):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_jax.analysis.reread_positions",
            f"--workdir={copy_workdir}",
            "--eval_positions=batch_offset",
            "--splits=test",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    written = json.loads(reread_positions.out_path(copy_workdir, "batch_offset", None).read_text())
    assert written["eval_positions"] == "batch_offset" and "wrote" in result.stdout
    assert set(written["metrics"]) == {"test"}


def test_a_reread_of_other_splits_keeps_the_splits_read_before(tmp_path):
    out = tmp_path / "eval_positions" / "step_offset.json"
    reading = {"eval_positions": "step_offset", "step": 30, "draw_seed": None}
    reread_positions.save_reading(out, {**reading, "metrics": {"test_long": {"loss": 2.0}}})
    reread_positions.save_reading(out, {**reading, "metrics": {"test": {"loss": 1.0}}})
    written = json.loads(out.read_text())
    assert written["metrics"] == {"test_long": {"loss": 2.0}, "test": {"loss": 1.0}}
    # A reading of another checkpoint replaces the file: its splits are not mixed in.
    later = {**reading, "step": 40, "metrics": {"test": {"loss": 0.5}}}
    reread_positions.save_reading(out, later)
    assert json.loads(out.read_text()) == later


def test_unknown_split_and_untrained_scheme_are_one_line_errors(copy_workdir):
    for flag, message in (
        ("--splits=validation", "--splits=['validation'] are not evaluated"),
        ("--eval_positions=randomized", "model.positional.eval_positions='randomized'"),
    ):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "transformer_jax.analysis.reread_positions",
                f"--workdir={copy_workdir}",
                flag,
            ],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2
        assert message in result.stderr and "reread_positions: error:" in result.stderr
