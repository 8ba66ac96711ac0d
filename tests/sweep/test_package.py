"""The package's public names, and no import cycle between the runner and the report."""

import subprocess
import sys

import pytest

import transformer_jax.sweep as sweep_package
from transformer_jax.sweep import runner, spec


def test_public_names_are_the_modules_own():
    assert sweep_package.Sweep is spec.Sweep and sweep_package.load_sweep is spec.load_sweep
    assert sweep_package.run_sweep is runner.run_sweep and sweep_package.plan is runner.plan
    for name in sweep_package.__all__:
        assert getattr(sweep_package, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        sweep_package.nope  # noqa: B018


@pytest.mark.parametrize(
    "first", ["transformer_jax.report.report", "transformer_jax.report.summary"]
)
def test_report_can_be_imported_before_the_sweep(first):
    code = (
        f"import {first}\nfrom transformer_jax.sweep import run_sweep\nprint(run_sweep.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "transformer_jax.sweep.runner"
