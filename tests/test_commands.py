"""Every command prints one `<command>: error: ...` line for a user error, with exit status 2."""

import subprocess
import sys
from pathlib import Path

import pytest

from transformer_jax.commands import USER_ERROR_EXIT_CODE

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
