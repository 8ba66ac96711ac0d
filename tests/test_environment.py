"""Report header facts: the machine description; and the platforms a command starts JAX on
(beside an installed libtpu without a TPU, the CPU, quietly)."""

import os
import subprocess
import sys

import pytest
from optional_packages import require

from transformer_jax import environment


def test_machine_info_describes_this_host():
    info = environment.machine_info()
    assert info["cpu_count"] == os.cpu_count()
    assert info["device_count"] >= 1 and info["platform"] in ("cpu", "gpu", "tpu", "cuda")
    line = environment.describe_machine(info)
    assert f"{os.cpu_count()} CPUs" in line and info["device_kind"] in line
    assert info["cpu_model"] == environment.cpu_model() and info["cpu_model"] in line


def test_default_platforms_skip_only_a_tpu_that_is_not_there():
    absent = dict(libtpu_installed=True, tpu_attached=False, gpu_attached=False)
    assert environment.default_platforms({}, **absent) == "cpu"
    assert environment.default_platforms({}, **{**absent, "libtpu_installed": False}) is None
    assert environment.default_platforms({}, **{**absent, "tpu_attached": True}) is None
    assert environment.default_platforms({}, **{**absent, "gpu_attached": True}) is None
    for chosen in ({"JAX_PLATFORMS": "tpu"}, {"JAX_PLATFORMS": ""}, {"JAX_FORCE_TPU_INIT": "1"}):
        assert environment.default_platforms(chosen, **absent) is None


# A JAX process that starts its backends after a command's flag parser (or without it), printing
# its platform and the JAX_PLATFORMS its own child processes would inherit.
_START = """
import os, sys
{parse}
import jax
print(jax.devices()[0].platform, os.environ.get("JAX_PLATFORMS"))
"""
_PARSE = "from transformer_jax.commands import parse_flags; parse_flags('probe')(['probe'])"


def start_jax(parse: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "JAX_PLATFORM_NAME")}
    # Without waiting for, or being hidden by, another process's hold on libtpu's lock file.
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    source = _START.format(parse=_PARSE if parse else "")
    return subprocess.run(
        [sys.executable, "-c", source], env=env, capture_output=True, text=True, check=True
    )


def test_commands_start_jax_quietly_beside_libtpu():
    require("libtpu", "libtpu", "requirements-tpu.txt")
    if environment.tpu_attached() or environment.gpu_attached():
        pytest.skip("an accelerator is attached: JAX's own choice of platform stands")
    bare = start_jax(parse=False)
    # The noise being removed: libtpu's failed start-up on a machine without a TPU.
    assert "TPU_WORKER_HOSTNAMES" in bare.stderr or "TPU_ACCELERATOR_TYPE" in bare.stderr
    command = start_jax(parse=True)
    assert command.stderr == ""
    # The environment is left alone: a process it starts (a Slurm job) decides for itself.
    assert command.stdout.split() == ["cpu", "None"]
