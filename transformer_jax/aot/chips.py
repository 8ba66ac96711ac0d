"""The one table of accelerator figures the estimates use, each with where it comes from.

Figures are per chip, as the vendors publish them: dense bfloat16 matrix-multiply peak (no
sparsity), HBM capacity and HBM bandwidth. On a TPU, JAX's default matmul precision runs float32
matmuls as one bfloat16 pass, so the bfloat16 peak is the peak of both dtypes there. A CPU has
no published figure that a roofline can trust: `measured_cpu` measures its matmul peak and
memory bandwidth instead (benchmarks/roofline_check.py).
"""

import dataclasses
import os
import time

import jax
import jax.numpy as jnp

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    peak_flops: float  # dense bfloat16 FLOP/s per chip
    hbm_bytes: float  # memory per chip, bytes
    hbm_bandwidth: float  # bytes/s per chip
    source: str  # where the three figures are published (or how they were measured)
    device_kinds: tuple[str, ...] = ()  # jax Device.device_kind strings of this chip


TPU_CHIPS = {
    chip.name: chip
    for chip in (
        Chip(
            "v4",
            275e12,
            32 * GIB,
            1200e9,
            "https://cloud.google.com/tpu/docs/v4 (275 TFLOP/s bf16, 32 GiB HBM2, 1,200 GB/s)",
            ("TPU v4",),
        ),
        Chip(
            "v5e",
            197e12,
            16 * GIB,
            819e9,
            "https://cloud.google.com/tpu/docs/v5e (197 TFLOP/s bf16, 16 GB HBM2, 819 GB/s)",
            ("TPU v5 lite", "TPU v5e"),
        ),
        Chip(
            "v5p",
            459e12,
            95 * GIB,
            2765e9,
            "https://cloud.google.com/tpu/docs/v5p (459 TFLOP/s bf16, 95 GB HBM2e, 2,765 GB/s)",
            ("TPU v5", "TPU v5p"),
        ),
        Chip(
            "v6e",
            918e12,
            32 * GIB,
            1640e9,
            "https://cloud.google.com/tpu/docs/v6e (918 TFLOP/s bf16, 32 GB HBM, 1,640 GB/s)",
            ("TPU v6 lite", "TPU v6e"),
        ),
    )
}

# For the device check on a real GPU (benchmarks/device_check.py): the estimate beside each
# measured figure uses these. Dense bfloat16 (T4: float16, it has no bfloat16 units).
GPU_CHIPS = {
    chip.name: chip
    for chip in (
        Chip(
            "H100 SXM",
            989e12,
            80 * GIB,
            3.35e12,
            "https://www.nvidia.com/en-us/data-center/h100/ (989 TFLOP/s bf16 dense, 80 GB, "
            "3.35 TB/s)",
            ("NVIDIA H100 80GB HBM3",),
        ),
        Chip(
            "H200",
            989e12,
            141 * GIB,
            4.8e12,
            "https://www.nvidia.com/en-us/data-center/h200/ (989 TFLOP/s bf16 dense, 141 GB, "
            "4.8 TB/s)",
            ("NVIDIA H200",),
        ),
        Chip(
            "A100 80GB",
            312e12,
            80 * GIB,
            2.039e12,
            "https://www.nvidia.com/en-us/data-center/a100/ (312 TFLOP/s bf16, 80 GB, "
            "2,039 GB/s SXM)",
            ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
        ),
        Chip(
            "A100 40GB",
            312e12,
            40 * GIB,
            1.555e12,
            "https://www.nvidia.com/en-us/data-center/a100/ (312 TFLOP/s bf16, 40 GB, 1,555 GB/s)",
            ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
        ),
        Chip(
            "L4",
            121e12,
            24 * GIB,
            300e9,
            "https://www.nvidia.com/en-us/data-center/l4/ (121 TFLOP/s bf16 dense, 24 GB, "
            "300 GB/s)",
            ("NVIDIA L4",),
        ),
        Chip(
            "T4",
            65e12,
            16 * GIB,
            320e9,
            "https://www.nvidia.com/en-us/data-center/tesla-t4/ (65 TFLOP/s fp16, 16 GB, 320 GB/s)",
            ("Tesla T4",),
        ),
    )
}


def chip_of_device_kind(device_kind: str) -> Chip | None:
    """The table's chip for a jax `Device.device_kind` ("TPU v5 lite"), or None."""
    for chip in (*TPU_CHIPS.values(), *GPU_CHIPS.values()):
        if device_kind in chip.device_kinds:
            return chip
    # GPU names carry a board suffix ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"): by prefix.
    for chip in GPU_CHIPS.values():
        if any(device_kind.startswith(kind.rsplit(" ", 1)[0]) for kind in chip.device_kinds):
            return chip
    return None


def matmul_peak_flops(size: int, dtype, device=None) -> float:
    """FLOP/s of the best of five (size x size) @ (size x size) products on `device`."""
    device = device or jax.devices()[0]
    keys = jax.random.split(jax.random.key(0))
    a, b = (jax.device_put(jax.random.normal(k, (size, size), dtype), device) for k in keys)
    matmul = jax.jit(jnp.matmul)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def memory_bandwidth(megabytes: int = 256, device=None) -> float:
    """Bytes/s of the best of five passes of `y = x * 2` over a float32 array of `megabytes`
    (one read and one write per element: what a streaming elementwise op costs)."""
    device = device or jax.devices()[0]
    x = jax.device_put(jnp.ones((megabytes * 2**20 // 4,), jnp.float32), device)
    scale = jax.jit(lambda x: x * 2)
    scale(x).block_until_ready()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        scale(x).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * x.nbytes / best


def measured_cpu(matmul_size: int = 2048, megabytes: int = 256) -> Chip:
    """This machine's CPU as a Chip: float32 matmul peak and memory bandwidth, measured now
    (so a loaded machine gives lower figures); its memory is not a limit the estimates use."""
    peak = matmul_peak_flops(matmul_size, jnp.float32)
    bandwidth = memory_bandwidth(megabytes)
    return Chip(
        "cpu",
        peak,
        float("inf"),
        bandwidth,
        f"measured: {matmul_size}^2 float32 matmul {peak / 1e9:,.1f} GFLOP/s, x*2 over "
        f"{megabytes} MiB {bandwidth / 1e9:,.1f} GB/s, {os.cpu_count()} cores",
    )


def local_chip(device=None, *, small: bool = False) -> Chip:
    """The figures of `device` (default: the first): published ones from the tables, else
    measured (a CPU, or an accelerator the tables do not know). `small`: quick, rough
    measurements (tests)."""
    device = device or jax.devices()[0]
    if device.platform == "cpu":
        return measured_cpu(512 if small else 2048, 16 if small else 256)
    chip = chip_of_device_kind(device.device_kind)
    if chip is not None:
        return chip
    peak = matmul_peak_flops(8192, jnp.bfloat16, device)
    bandwidth = memory_bandwidth(1024, device)
    memory = (device.memory_stats() or {}).get("bytes_limit", float("inf"))
    return Chip(
        device.device_kind,
        peak,
        memory,
        bandwidth,
        f"measured on the device: 8192^2 bfloat16 matmul {peak / 1e12:,.1f} TFLOP/s, x*2 over "
        f"1 GiB {bandwidth / 1e9:,.0f} GB/s",
    )
