"""Report header facts: the machine description."""

import os

from transformer_jax import environment


def test_machine_info_describes_this_host():
    info = environment.machine_info()
    assert info["cpu_count"] == os.cpu_count()
    assert info["device_count"] >= 1 and info["platform"] in ("cpu", "gpu", "tpu", "cuda")
    line = environment.describe_machine(info)
    assert f"{os.cpu_count()} CPUs" in line and info["device_kind"] in line
    assert info["cpu_model"] == environment.cpu_model() and info["cpu_model"] in line
