"""Report header facts: git commit and machine description."""

import os

from transformer_jax.report import environment


def test_git_commit_outside_a_repository_is_unknown(tmp_path):
    assert environment.git_commit(str(tmp_path)) == "unknown"


def test_machine_info_describes_this_host():
    info = environment.machine_info()
    assert info["cpu_count"] == os.cpu_count()
    assert info["device_count"] >= 1 and info["platform"] in ("cpu", "gpu", "tpu", "cuda")
    line = environment.describe_machine(info)
    assert f"{os.cpu_count()} CPUs" in line and info["device_kind"] in line
