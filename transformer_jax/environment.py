"""Where a sweep ran, recorded in sweep.json and named in report headers and speed figures: the
machine (the git commit is `run_dir.git_commit`); and which platforms a command starts JAX on.

libtpu (requirements-tpu.txt, for compiling TPU programs ahead of time on any machine) makes
every JAX process probe for a TPU when its backends start: on a machine without one it prints
libtpu's initialisation errors (TPU_ACCELERATOR_TYPE, TPU_WORKER_HOSTNAMES, a source trace) and,
when the probe holds libtpu's lock file, leaves the next process to fail to take it. The
project's commands therefore start JAX on the CPU alone where libtpu is installed but no TPU and
no GPU is attached (`skip_absent_tpu`), each process deciding for itself; the ahead-of-time
compiler still loads libtpu for its TPU topologies (aot/topology.py).
"""

import importlib.util
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
        platforms = absent_tpu_platforms()  # the platform a command here would start on
        env = {**os.environ, **({"JAX_PLATFORMS": platforms} if platforms else {})}
        probe = subprocess.run(
            [sys.executable, "-c", _DEVICE_PROBE],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
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


# Device files of a GPU that JAX's CUDA or ROCm plugin would drive (jax/_src/hardware_utils.py
# lists the NVIDIA ones; /dev/kfd is AMD's compute driver).
_GPU_DEVICE_FILES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")
# Variables with which a user asks for a TPU or names the platforms themselves.
_PLATFORM_CHOICES = ("JAX_PLATFORMS", "JAX_PLATFORM_NAME", "JAX_FORCE_TPU_INIT")


def default_platforms(
    environ: dict[str, str], *, libtpu_installed: bool, tpu_attached: bool, gpu_attached: bool
) -> str | None:
    """The JAX_PLATFORMS a command sets: "cpu" when libtpu is installed and nothing it could
    drive is attached (no TPU, no GPU) and the user chose no platform; None (leave JAX's own
    choice) otherwise."""
    if any(name in environ for name in _PLATFORM_CHOICES):
        return None
    if not libtpu_installed or tpu_attached or gpu_attached:
        return None
    return "cpu"


def tpu_attached() -> bool:
    """Whether a TPU chip is on this machine's PCI bus, as JAX itself checks at import; True
    when the check is unavailable (a JAX without it), so that nothing is skipped on a guess."""
    try:
        from jax._src import hardware_utils  # noqa: PLC0415 (JAX's own probe; private)

        return hardware_utils.num_available_tpu_chips_and_device_id()[0] > 0
    except (ImportError, AttributeError, OSError):
        return True


def gpu_attached() -> bool:
    """Whether a GPU's device files are here (JAX's CUDA or ROCm plugin would drive it)."""
    return any(os.path.exists(path) for path in _GPU_DEVICE_FILES)


def absent_tpu_platforms() -> str | None:
    """`default_platforms` of this process and machine: "cpu" where libtpu is installed but no
    TPU or GPU is attached and the user chose no platform, else None."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    return default_platforms(
        os.environ, libtpu_installed=True, tpu_attached=tpu_attached(), gpu_attached=gpu_attached()
    )


def skip_absent_tpu() -> None:
    """Starts this process's JAX on the CPU where libtpu is installed but no TPU or GPU is
    attached (see the module doc). Call before JAX's backends start (commands.py's flag parser
    does, for every command). The environment is left alone: a process this one starts decides
    again where it runs (a Slurm job submitted from a login node keeps its node's GPU)."""
    platforms = absent_tpu_platforms()
    if platforms is not None:
        import jax  # noqa: PLC0415 (only where a choice is made: this module serves JAX-free tools)

        jax.config.update("jax_platforms", platforms)
