"""Where a sweep ran, recorded in sweep.json and named in report headers and speed figures: the
machine (the git commit is `run_dir.git_commit`)."""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

# Runs in a child process: initialising a backend in the sweep runner itself would hold GPU memory
# that the training subprocesses need.
_DEVICE_PROBE = """
import json, jax
devices = jax.devices()
print(json.dumps({
    "jax_version": jax.__version__,
    "platform": devices[0].platform,
    "device_kind": devices[0].device_kind,
    "device_count": len(devices),
    "devices": [str(d) for d in devices],
}))
"""


def machine_info() -> dict[str, Any]:
    """Host and accelerator description; device fields are "unknown" if jax cannot start."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
    }
    try:
        probe = subprocess.run(
            [sys.executable, "-c", _DEVICE_PROBE], capture_output=True, text=True, timeout=300
        )
        info.update(json.loads(probe.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        info.update(platform="unknown", device_kind="unknown", device_count=0, devices=[])
    return info


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo, else platform.processor()), "" if unknown:
    speed figures name the machine, and CPU models differ several-fold in matmul throughput."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def describe_machine(info: dict[str, Any]) -> str:
    """One line, e.g. "1 x NVIDIA H200 (gpu), 16 CPUs (Intel(R) Xeon(R) ...), jax 0.10.2,
    Linux-...; host: h"."""
    model = f" ({info['cpu_model']})" if info.get("cpu_model") else ""
    return (
        f"{info.get('device_count', '?')} x {info.get('device_kind', 'unknown')} "
        f"({info.get('platform', 'unknown')}), {info.get('cpu_count', '?')} CPUs{model}, "
        f"jax {info.get('jax_version', '?')}, {info.get('os', '?')}; "
        f"host {info.get('hostname', '?')}"
    )
