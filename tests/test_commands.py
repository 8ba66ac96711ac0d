"""Every command prints one `<command>: error: ...` line for a user error, with exit status 2."""

import subprocess
import sys
from pathlib import Path

import pytest

from transformer_jax.commands import (
    USER_ERROR_EXIT_CODE,
    launch_dir,
    recorded_command,
    recorded_shell_command,
)

REPO = Path(__file__).resolve().parents[1]


def _run(module: str, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", module, *flags]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("module", "flags", "message"),
    [
        (
            "transformer_jax.main",
            ["--config=configs/algorithmic.py:copy", "--config.data.batch_size=0"],
            "main: error: data.batch_size=0 must be an integer >= 1",
        ),
        (
            "transformer_jax.main",
            ["--config=configs/algorithmic.py:copy", "--config.model.nonexistent=3"],
            "main: error: --config.model.nonexistent: the config has no such field",
        ),
        (
            "transformer_jax.main",
            ["--config=configs/algorithmic.py:copy", "--config.train.steps=abc"],
            "main: error: flag --config.train.steps=abc: invalid literal for int()",
        ),
        (
            "transformer_jax.main",
            ["--config=configs/algorithmic.py:nosuch"],
            "main: error: config argument 'nosuch' is not valid; valid: one of",
        ),
        ("transformer_jax.generate", ["--input=0 1"], "generate: error: --workdir="),
        (
            "transformer_jax.analysis.attention_maps",
            ["--input=0 1", "--out=x.png"],
            "attention_maps: error: --workdir=",
        ),
    ],
)
def test_user_errors_print_one_line(tmp_path, module, flags, message):
    result = _run(module, f"--workdir={tmp_path / 'run'}", *flags)
    assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(message), result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("argv", "recorded"),
    [
        # An absolute path inside the repository, as a flag's value or an argument of its own.
        (["--workdir=/repo/results/x", "--parallel=2"], "--workdir=results/x --parallel=2"),
        (["--workdir", "/repo/runs/x/"], "--workdir runs/x"),
        (["--sweep=/repo/experiments/a.py"], "--sweep=experiments/a.py"),
        # As typed: relative paths, paths outside the repository, values that are not paths.
        (["--workdir=runs/x", "--variants=a,b"], "--workdir=runs/x --variants=a,b"),
        (["--workdir=/elsewhere/x"], "--workdir=/elsewhere/x"),
        (["--workdir=/repository_other/x"], "--workdir=/repository_other/x"),
        (["--workdir=/repo/../elsewhere"], "--workdir=/repo/../elsewhere"),
        (["--input=a b"], "'--input=a b'"),
    ],
)
def test_recorded_command_names_repository_paths_relative_to_it(argv, recorded):
    assert recorded_command("m", argv, repository="/repo") == f"python -m m {recorded}"


def test_recorded_command_defaults_to_this_checkout():
    recorded = recorded_command("x", [f"--workdir={REPO}/results/y"])
    assert recorded == "python -m x --workdir=results/y"


def test_launch_dir_is_relative_inside_the_repository(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO / "configs")
    assert launch_dir() == "configs"
    monkeypatch.chdir(REPO)
    assert launch_dir() == "."
    monkeypatch.chdir(tmp_path)
    assert launch_dir() == str(tmp_path)


def test_a_run_launched_in_the_repository_is_recorded_relative_to_it():
    argv = ["/usr/bin/python3", "-m", "m", "--workdir=/repo/results/s/a/seed_0", "--config=c.py"]
    env = {"OMP_NUM_THREADS": "1", "JAX_COMPILATION_CACHE_DIR": "/repo/results/s/.cache"}
    recorded = recorded_shell_command(argv, "/repo", env, repository="/repo")
    assert recorded == (
        "OMP_NUM_THREADS=1 JAX_COMPILATION_CACHE_DIR=results/s/.cache "
        "python -m m --workdir=results/s/a/seed_0 --config=c.py"
    )
    # From a folder of the repository: cd there (relative), paths relative to it.
    assert recorded_shell_command(argv, "/repo/results", {}, repository="/repo") == (
        "cd results && python -m m --workdir=s/a/seed_0 --config=c.py"
    )
    # Outside the repository: the exact, absolute line, as before.
    assert recorded_shell_command(argv, "/elsewhere", env, repository="/repo") == (
        "cd /elsewhere && OMP_NUM_THREADS=1 JAX_COMPILATION_CACHE_DIR=/repo/results/s/.cache "
        "/usr/bin/python3 -m m --workdir=/repo/results/s/a/seed_0 --config=c.py"
    )
