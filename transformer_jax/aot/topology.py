"""TPU slices described on any machine: `v5e:2x4` -> its devices, for compiling ahead of time.

With libtpu installed (requirements-tpu.txt), `jax.experimental.topologies.get_topology_desc`
returns compile-only devices of a slice that is not there, and `jax.jit(...).lower(...)
.compile()` against a mesh of them runs the real TPU compiler. Names are `<chip>:<shape>`: 2-D
shapes for v5e and v6e (`v5e:1x1` is Colab's v5e-1, `v5e:2x4` a v5e-8 host), 3-D for v4 and v5p
(`v4:2x2x1` is a v4-8: four chips of two TensorCores each). v4 and v5p run as "megacore", one
JAX device per chip (as on a real v4/v5p VM), so a device is a chip in every estimate.
"""

import contextlib
import dataclasses
import math
import os
import re
import sys

from transformer_jax.aot.chips import TPU_CHIPS, Chip, local_chip

_NAME = re.compile(r"^(?P<chip>[a-z0-9]+):(?P<shape>\d+(x\d+)*)$")
_DIMS = {"v4": 3, "v5p": 3, "v5e": 2, "v6e": 2}
_MEGACORE = ("v4", "v5p")
# Chips one host drives: a bigger slice spans several hosts, which the compiler is told.
_CHIPS_PER_HOST = {"v4": (2, 2, 1), "v5p": (2, 2, 1), "v5e": (2, 4, 1), "v6e": (2, 4, 1)}


@dataclasses.dataclass(frozen=True)
class Topology:
    name: str
    chip: Chip
    devices: tuple  # compile-only jax devices, one per chip

    @property
    def num_chips(self) -> int:
        return len(self.devices)


LOCAL = "local"


def local_topology() -> Topology:
    """This process's own devices, with their chip's figures (a CPU's measured): for an
    estimate on the accelerator a notebook runtime has, compiled by its own compiler."""
    import jax  # noqa: PLC0415 (only here: a TPU slice must be described before JAX starts)

    devices = tuple(jax.devices())
    return Topology(LOCAL, local_chip(devices[0]), devices)


def valid_names() -> str:
    return (
        f"{LOCAL!r} (this machine's devices), or <chip>:<shape> with chip one of "
        + ", ".join(f"{c} ({'x'.join(['N'] * d)})" for c, d in _DIMS.items())
        + ", e.g. v5e:1x1, v5e:2x4, v4:2x2x1, v6e:2x4"
    )


def parse(name: str) -> tuple[str, tuple[int, ...]]:
    """`v5e:2x4` -> ("v5e", (2, 4)); a ValueError naming the valid forms otherwise."""
    match = _NAME.match(name or "")
    chip = match and match["chip"]
    if not match or chip not in _DIMS:
        raise ValueError(
            f"--topology={name!r} is not a TPU topology this knows; valid: " + valid_names()
        )
    shape = tuple(int(n) for n in match["shape"].split("x"))
    if len(shape) != _DIMS[chip] or min(shape) < 1:
        raise ValueError(
            f"--topology={name!r}: {chip} slices have {_DIMS[chip]}-D shapes of positive "
            f"sizes, e.g. {chip}:{'x'.join(['2'] * (_DIMS[chip] - 1) + ['1'])}"
        )
    return chip, shape


@contextlib.contextmanager
def _quiet_stderr():
    """Sends file descriptor 2 (C++ logging writes to it directly) to /dev/null meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def get_topology(name: str) -> Topology:
    """The compile-only devices of TPU slice `name` (or "local": this machine's devices); a
    ValueError for a name the installed libtpu does not accept, or when libtpu is missing."""
    if name == LOCAL:
        return local_topology()
    from jax.experimental import topologies  # noqa: PLC0415 (heavy; only for AOT commands)

    chip, shape = parse(name)
    # libtpu locks /tmp/libtpu_lockfile for the process that drives real chips; describing a
    # slice drives none, so it must not wait for (or take from) another process.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    host = _CHIPS_PER_HOST[chip]
    full = (*shape, 1) if len(shape) == 2 else shape
    kwargs = {"chips_per_host_bounds": tuple(min(s, h) for s, h in zip(full, host, strict=True))}
    if chip in _MEGACORE:
        kwargs["chip_config_name"] = "megacore"
    try:
        with _quiet_stderr():  # libtpu logs its missing cloud metadata; it needs none here.
            description = topologies.get_topology_desc(topology_name=name, platform="tpu", **kwargs)
    except Exception as error:  # libtpu missing or the shape refused: say which, one line.
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"--topology={name!r} could not be described by libtpu ({first}); install "
            f"requirements-tpu.txt, and use a slice shape libtpu accepts ({valid_names()})"
        ) from None
    devices = tuple(description.devices)
    if len(devices) != math.prod(shape):
        raise ValueError(
            f"--topology={name!r} gave {len(devices)} devices for {math.prod(shape)} chips"
        )
    return Topology(name, TPU_CHIPS[chip], devices)
