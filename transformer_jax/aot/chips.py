"""The one table of accelerator figures the estimates use, each with where it comes from.

Figures are per chip, as the vendors publish them, dense (no sparsity): the bfloat16
matrix-multiply peak, the float32 one as JAX runs float32 matmuls by default, HBM capacity and
HBM bandwidth. On a TPU, JAX's default matmul precision runs a float32 matmul as one bfloat16
pass, so the bfloat16 peak is the peak of both dtypes there. On an NVIDIA GPU from Ampere on, the
default precision runs it on the TF32 tensor cores, at half the bfloat16 rate or less; on older
GPUs (T4, V100) it runs on the float32 cores, and XLA computes a bfloat16 matmul in float32 too
(those chips have no bfloat16 units), so both dtypes get the float32 rate. A chip is looked up by
its exact jax `Device.device_kind`: a kind the table does not list (another board of a known
GPU, a newer chip) gets figures measured on the device, with one printed line saying so,
never a neighbour's. A CPU has no published figure that a roofline can trust: `measured_cpu`
measures its matmul peak and memory bandwidth instead (benchmarks/roofline_check.py).
"""

import dataclasses
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    peak_flops: float  # dense bfloat16 matmul FLOP/s per chip
    hbm_bytes: float  # memory per chip, bytes
    hbm_bandwidth: float  # bytes/s per chip
    source: str  # where the figures are published (or how they were measured)
    device_kinds: tuple[str, ...] = ()  # jax Device.device_kind strings of this chip, exactly
    float32_flops: float | None = None  # dense float32 matmul FLOP/s at JAX's default
    # precision (TF32 on an Ampere or later GPU); None: the bfloat16 peak (a TPU)

    def peak_for(self, dtype) -> float:
        """Matmul peak FLOP/s of compute in `dtype` (float32, bfloat16 or float16)."""
        if jnp.dtype(dtype) == jnp.float32 and self.float32_flops is not None:
            return self.float32_flops
        return self.peak_flops

    def at_dtype(self, dtype) -> "Chip":
        """This chip with `peak_flops` the peak of compute in `dtype`: what a roofline of a
        program computing in `dtype` divides by."""
        return dataclasses.replace(self, peak_flops=self.peak_for(dtype))


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


# NVIDIA's datasheets, per GPU. Dense rates: where a datasheet gives only the sparse
# tensor-core rate (H100, H200, L4: "1,979*"), half of it. The float32 column is the TF32 tensor
# cores from Ampere on, the float32 cores before (T4, V100: there bfloat16 runs at that rate too,
# see the module doc; the T4's 65 TFLOP/s are float16, which JAX's bfloat16 does not use).
_DATASHEETS = {
    "H100": "https://www.nvidia.com/en-us/data-center/h100/",
    "H200": "https://www.nvidia.com/en-us/data-center/h200/",
    "A100": "https://www.nvidia.com/en-us/data-center/a100/",
    "A10": "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
    "L4": "https://www.nvidia.com/en-us/data-center/l4/",
    "L40S": "https://www.nvidia.com/en-us/data-center/l40s/",
    "T4": "https://www.nvidia.com/en-us/data-center/tesla-t4/",
    "V100": "https://www.nvidia.com/en-us/data-center/v100/",
}
# chip, jax device kind, datasheet, bfloat16 and float32 TFLOP/s, memory GB, bandwidth GB/s
_NVIDIA = (
    ("H100 SXM", "NVIDIA H100 80GB HBM3", "H100", 989.5, 494.5, 80, 3350),
    ("H100 PCIe", "NVIDIA H100 PCIe", "H100", 756.5, 378, 80, 2000),
    ("H100 NVL", "NVIDIA H100 NVL", "H100", 835.5, 417.5, 94, 3900),
    ("H200", "NVIDIA H200", "H200", 989.5, 494.5, 141, 4800),
    ("H200 NVL", "NVIDIA H200 NVL", "H200", 835.5, 417.5, 141, 4800),
    ("A100 SXM 80GB", "NVIDIA A100-SXM4-80GB", "A100", 312, 156, 80, 2039),
    ("A100 PCIe 80GB", "NVIDIA A100 80GB PCIe", "A100", 312, 156, 80, 1935),
    ("A100 SXM 40GB", "NVIDIA A100-SXM4-40GB", "A100", 312, 156, 40, 1555),
    ("A100 PCIe 40GB", "NVIDIA A100-PCIE-40GB", "A100", 312, 156, 40, 1555),
    ("A10", "NVIDIA A10", "A10", 125, 62.5, 24, 600),
    ("L4", "NVIDIA L4", "L4", 121, 60, 24, 300),
    ("L40S", "NVIDIA L40S", "L40S", 362, 183, 48, 864),
    ("T4", "Tesla T4", "T4", 8.1, 8.1, 16, 320),
    ("V100 SXM2 16GB", "Tesla V100-SXM2-16GB", "V100", 15.7, 15.7, 16, 900),
    ("V100 SXM2 32GB", "Tesla V100-SXM2-32GB", "V100", 15.7, 15.7, 32, 900),
    ("V100 PCIe 16GB", "Tesla V100-PCIE-16GB", "V100", 14, 14, 16, 900),
    ("V100 PCIe 32GB", "Tesla V100-PCIE-32GB", "V100", 14, 14, 32, 900),
)
GPU_CHIPS = {
    name: Chip(
        name,
        bf16 * 1e12,
        memory * GIB,
        gb_per_s * 1e9,
        f"{_DATASHEETS[sheet]} ({name}, dense: bfloat16 {bf16:g} TFLOP/s, float32 {fp32:g} "
        f"({'TF32' if fp32 < bf16 else 'no TF32'}), {memory} GB, {gb_per_s:,} GB/s)",
        (kind,),
        fp32 * 1e12,
    )
    for name, kind, sheet, bf16, fp32, memory, gb_per_s in _NVIDIA
}


def chip_of_device_kind(device_kind: str) -> Chip | None:
    """The table's chip for a jax `Device.device_kind` ("TPU v5 lite"), exactly; None for a
    kind it does not list (no match by prefix: boards of one name differ in bandwidth)."""
    for chip in (*TPU_CHIPS.values(), *GPU_CHIPS.values()):
        if device_kind in chip.device_kinds:
            return chip
    return None


def published_or_measured(device_kind: str, measure: Callable[[], Chip]) -> Chip:
    """The table's chip for `device_kind`, else `measure()`, with one printed line saying that
    the figures are measured and which."""
    chip = chip_of_device_kind(device_kind)
    if chip is None:
        chip = measure()
        print(
            f"chips: {device_kind!r} has no published figures in transformer_jax/aot/chips.py; "
            f"using figures measured on it ({chip.source})",
            flush=True,
        )
    return chip


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


def measured_accelerator(device, *, small: bool = False) -> Chip:
    """`device` as a Chip from measurements on it (as benchmarks/roofline_check.py measures a
    CPU): bfloat16 and float32 matmul peaks, streaming bandwidth, the memory JAX may use.
    `small`: quick, rough measurements (tests)."""
    size, megabytes = (512, 16) if small else (8192, 1024)
    peak = matmul_peak_flops(size, jnp.bfloat16, device)
    float32 = matmul_peak_flops(size, jnp.float32, device)
    bandwidth = memory_bandwidth(megabytes, device)
    memory = (device.memory_stats() or {}).get("bytes_limit", float("inf"))
    return Chip(
        device.device_kind,
        peak,
        memory,
        bandwidth,
        f"measured on the device: {size}^2 matmuls bfloat16 {peak / 1e12:,.2f} and float32 "
        f"{float32 / 1e12:,.2f} TFLOP/s, x*2 over {megabytes} MiB {bandwidth / 1e9:,.0f} GB/s",
        (device.device_kind,),
        float32,
    )


def local_chip(device=None, *, small: bool = False) -> Chip:
    """The figures of `device` (default: the first): published ones from the tables by exact
    device kind, else measured (a CPU, or an accelerator the tables do not list, with a line
    saying so). `small`: quick, rough measurements (tests)."""
    device = device or jax.devices()[0]
    if device.platform == "cpu":
        return measured_cpu(512 if small else 2048, 16 if small else 256)
    return published_or_measured(
        device.device_kind, lambda: measured_accelerator(device, small=small)
    )
