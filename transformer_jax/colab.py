"""The Colab notebook's install and probe (notebooks/colab_tpu.ipynb), standard library only: the
notebook loads this file by its path before the package and its requirements are installed.

A Colab TPU runtime ships jax, jaxlib and libtpu built for each other. A plain `pip install -e .`
may pick a flax that needs a newer jax; pip then upgrades jax and jaxlib but not libtpu, and the
new jax no longer finds the TPU: every run falls back to the CPU without a word. The install
therefore runs against a pip constraint file that pins what is installed (`keep_installed`), so
pip picks the flax, optax and orbax that work with that jax, or fails saying which package would
need another jax (`install`). The probe stops on a runtime that has an accelerator jax cannot
see (`accelerator_unseen`).
"""

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping

# The distributions that make up a runtime's jax: the front end, its compiled half and the
# accelerator plugins (libtpu on a TPU runtime, older ones libtpu-nightly; CUDA's on a GPU one).
_KEPT = re.compile(r"^(jax|jaxlib|libtpu|libtpu-nightly|jax-cuda\d+-(plugin|pjrt))$")
# What says a runtime has a TPU: Colab's and Cloud TPU VMs' variables, and the chips' device
# files (v2-v4 expose /dev/accel*, v5e and later /dev/vfio/*).
_TPU_VARIABLES = ("COLAB_TPU_ADDR", "TPU_NAME", "TPU_ACCELERATOR_TYPE")
_TPU_DEVICE_GLOBS = ("/dev/accel*", "/dev/vfio/[0-9]*")
_GPU_DEVICE_FILES = ("/dev/nvidia0",)


class Stop(Exception):
    """An error the notebook shows as its one line (IPython renders `_render_traceback_`
    instead of a traceback), stopping "Run all" at that cell."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): "jax_cuda12_plugin" ->
    "jax-cuda12-plugin"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def keep_installed(freeze: Iterable[str]) -> list[str]:
    """The constraint lines ("jax==0.6.2") that keep the runtime's jax as it is, from `pip freeze`
    lines; other packages and lines that pin no version (editable or URL installs) are left out."""
    kept = []
    for line in freeze:
        name, sep, version = line.strip().partition("==")
        if sep and _KEPT.match(normalized(name)):
            kept.append(f"{normalized(name)}=={version.strip()}")
    return sorted(kept)


def conflict(pip_output: str) -> str:
    """pip's reason for a failed resolution in one line: the requirements it lists under "The
    conflict is caused by:" (e.g. "flax 0.12.1 depends on jax>=0.7; The user requested
    (constraint) jax==0.6.2"), else pip's last line."""
    lines = [line.strip() for line in pip_output.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("The conflict is caused by"):
            causes = []
            for cause in lines[i + 1 :]:
                if not re.search(r"depends on|requested", cause):
                    break
                causes.append(cause)
            if causes:
                return "; ".join(causes)
    return lines[-1] if lines else "pip printed nothing"


def install(
    repo_dir: str,
    *,
    python: str = sys.executable,
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
) -> list[str]:
    """`pip install -e repo_dir` against a constraint file pinning this interpreter's jax,
    jaxlib and accelerator plugins; returns the pins. Raises `Stop` naming the conflict when the
    package's requirements need another jax than the one installed."""
    freeze = run([python, "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
    pins = keep_installed(freeze.stdout.splitlines())
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write("".join(f"{pin}\n" for pin in pins))
    command = [python, "-m", "pip", "install", "-c", constraints.name, "-e", repo_dir]
    try:
        result = run(command, capture_output=True, text=True)
    finally:
        os.unlink(constraints.name)
    if result.returncode != 0:
        kept = ", ".join(pins) or "nothing"
        reason = conflict(result.stdout + result.stderr)
        raise Stop(
            f"install stopped to keep the runtime's {kept}: {reason}"
            " (pick a runtime with a newer jax, or upgrade jax together with its plugins yourself)"
        )
    return pins


def versions(names: Iterable[str]) -> str:
    """ "flax 0.10.7, optax 0.2.5": what the install picked, for the notebook to say so."""
    from importlib import metadata  # noqa: PLC0415

    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def accelerator_unseen(
    backend: str,
    environ: Mapping[str, str] = os.environ,
    exists: Callable[[str], bool] = os.path.exists,
    glob: Callable[[str], list[str]] | None = None,
) -> str | None:
    """One line saying the runtime has a TPU (or GPU) that jax does not see, when jax's default
    `backend` is "cpu" and the runtime shows one (its variables or device files); None otherwise."""
    if backend != "cpu":
        return None
    if glob is None:
        import glob as globbing  # noqa: PLC0415

        glob = globbing.glob
    signs = [name for name in _TPU_VARIABLES if environ.get(name)]
    signs += [path for pattern in _TPU_DEVICE_GLOBS for path in sorted(glob(pattern))]
    if signs:
        return (
            f"this runtime has a TPU ({', '.join(signs[:3])}) but jax sees only the CPU: jax, "
            "jaxlib and libtpu no longer match (Runtime > Disconnect and delete runtime, then "
            "run all again)"
        )
    gpus = [path for path in _GPU_DEVICE_FILES if exists(path)]
    if gpus:
        return (
            f"this runtime has a GPU ({gpus[0]}) but jax sees only the CPU: jax and its CUDA "
            "plugin no longer match (Runtime > Disconnect and delete runtime, then run all again)"
        )
    return None
