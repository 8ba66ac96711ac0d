"""A real full disk (a small tmpfs, mounted when the tests run as root): the run ends with one
`main: error:` line naming the checkpoint that could not be saved, exit status 2, a "failed"
summary, and the last good checkpoint intact, for a run and for a seed group.

The disk fills deterministically: the training iterator, as it fetches its 8th batch once
every run's checkpoint 5 is on disk, writes a file over all but 64 KiB of the free space, so
the save of step 10 (about 0.5 MB a run) is the first write that cannot fit.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from train_fixtures import dotted, tiny_config

from transformer_jax.commands import USER_ERROR_EXIT_CODE
from transformer_jax.train.restore import load_run

REPO = Path(__file__).resolve().parents[2]
RESERVE = 64 * 1024  # bytes left free: the metrics lines and a summary fit, a checkpoint not

# transformer_jax.main (hooked_iterator.run_main) whose training iterator fills the disk as it
# fetches its 8th batch; argv: mount, reserve, runs, then main's flags.
FILL_AND_RUN_MAIN = """
import glob, os, sys, time
from hooked_iterator import run_main

mount, reserve, runs = sys.argv.pop(1), int(sys.argv.pop(1)), int(sys.argv.pop(1))


def fill_the_disk(fetched, batch):
    filler = os.path.join(mount, "filler")
    if fetched == 8 and not os.path.exists(filler):  # Once (a group has 2 iterators).
        # Every run's checkpoint 5 (a group's seeds save one after the other).
        saved = os.path.join(mount, "**", "checkpoints", "5")
        while len(glob.glob(saved, recursive=True)) < runs:
            time.sleep(0.05)
        stat = os.statvfs(mount)
        with open(filler, "wb") as f:
            f.write(bytes(max(0, stat.f_bavail * stat.f_frsize - reserve)))
    return batch


run_main(fill_the_disk)
"""


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs at tmp_path/disk; skipped unless root (mount needs it)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root; this test fills a real filesystem")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _train_on(
    mount: Path, data_dir: Path, *flags: str, runs=1, reserve=RESERVE
) -> subprocess.CompletedProcess:
    config = tiny_config(data_dir, steps_=20, log_every=5, checkpoint_every=5, eval_every=10)
    config.train.generate_eval = False
    config.data.num_test_long = 0
    script = [FILL_AND_RUN_MAIN, str(mount), str(reserve), str(runs)]
    return _run_main(script, config, f"--workdir={mount / 'run'}", *flags)


def _run_main(script: list[str], config, *flags: str) -> subprocess.CompletedProcess:
    """`python -c script...` (a hooked transformer_jax.main) on `config` given as overrides."""
    command = [sys.executable, "-c", *script, "--config=configs/algorithmic.py:copy", *flags]
    for section in ("model", "data", "train"):
        for key, value in dotted(config[section].to_dict()):
            command.append(f"--config.{section}.{key}={value}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)


def _check_failed_in_one_line(result, runs: list[Path]):
    """One error line, naming the save of step 10 of one of `runs` (a group's seeds all fail
    there; whichever is found first is reported), and a "failed" summary in each run."""
    assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("main: error: checkpoint "), errors
    named = [run for run in runs if f"{run / 'checkpoints' / '10'} could not be saved" in errors[0]]
    assert len(named) == 1, errors[0]
    assert "step 5 is the last good checkpoint" in errors[0]
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "failed" and "/10 could not be saved" in summary["error"]


def test_a_full_disk_fails_the_run_in_one_line(small_disk, tmp_path):
    run = small_disk / "run"
    _check_failed_in_one_line(_train_on(small_disk, tmp_path / "tfds"), [run])
    (small_disk / "filler").unlink()
    assert int(load_run(str(run)).state.step) == 5  # intact: its checksums verify


def test_a_disk_full_to_its_last_byte_fails_in_one_line_and_leaves_no_half_written_step(
    small_disk, tmp_path
):
    """No byte left: the save of step 10 fails at its first write (orbax's step metadata) while
    its array writes are still in flight; they end before the half-written step is deleted,
    so it stays deleted, and their own errors are not printed."""
    run = small_disk / "run"
    result = _train_on(small_disk, tmp_path / "tfds", reserve=0)
    assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"main: error: checkpoint {run / 'checkpoints' / '10'} could not")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["5"]


@pytest.mark.slow  # the group's seeds fail at one save as the run above does (a minute more)
def test_a_full_disk_fails_every_seed_of_a_group_in_one_line(small_disk, tmp_path):
    runs = [small_disk / "run" / f"seed_{seed}" for seed in (0, 1)]
    _check_failed_in_one_line(_train_on(small_disk, tmp_path / "tfds", "--seeds=0,1", runs=2), runs)
    (small_disk / "filler").unlink()
    for run in runs:
        assert int(load_run(str(run)).state.step) == 5


# transformer_jax.main whose training iterator sends the first Ctrl-C as it fetches its 7th batch,
# and whose checkpointer gets the second one as the forced save that the first asked for starts.
CTRL_C_TWICE = """
import signal
from hooked_iterator import run_main
from transformer_jax.train import checkpoint

save = checkpoint.Checkpointer.save


def save_interrupted(self, step, *args, force=False, **kwargs):
    if force:
        signal.raise_signal(signal.SIGINT)
    return save(self, step, *args, force=force, **kwargs)


def first_ctrl_c(fetched, batch):
    if fetched == 7:
        signal.raise_signal(signal.SIGINT)
    return batch


checkpoint.Checkpointer.save = save_interrupted
run_main(first_ctrl_c)
"""


def test_a_second_ctrl_c_during_the_save_is_one_line_and_keeps_the_checkpoints(tmp_path):
    """Not a full disk, but the same promise: an interrupted save ends in one line, and the
    checkpoints already written stay loadable."""
    config = tiny_config(tmp_path / "tfds", steps_=20, log_every=5, checkpoint_every=5)
    config.train.generate_eval = False
    result = _run_main([CTRL_C_TWICE], config, f"--workdir={tmp_path / 'run'}")
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "main: interrupted by a second Ctrl-C; the checkpoints already saved are intact"
        )
    )
    assert int(load_run(str(tmp_path / "run")).state.step) >= 5
