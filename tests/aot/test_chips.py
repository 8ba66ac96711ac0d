"""The chip table: exact device kinds, float32 against bfloat16 peaks, and measured figures (with
a line saying so) for an accelerator the table does not list."""

import jax
import jax.numpy as jnp
import pytest

from transformer_jax.aot import chips


def test_every_listed_kind_finds_its_own_chip():
    for chip in (*chips.TPU_CHIPS.values(), *chips.GPU_CHIPS.values()):
        assert chip.device_kinds, chip.name
        for kind in chip.device_kinds:
            assert chips.chip_of_device_kind(kind) is chip


@pytest.mark.parametrize(
    "kind",
    [
        "NVIDIA H100 80GB HBM3e",  # an H100 board the table does not list
        "NVIDIA A10G",
        "NVIDIA GeForce RTX 4090",
        "Tesla V100S-PCIE-32GB",
        "NVIDIA",
        "TPU v7",
    ],
)
def test_an_unlisted_kind_has_no_neighbours_figures(kind):
    assert chips.chip_of_device_kind(kind) is None


def test_boards_of_one_gpu_keep_their_own_figures():
    h100_pcie = chips.chip_of_device_kind("NVIDIA H100 PCIe")
    h200 = chips.chip_of_device_kind("NVIDIA H200")
    assert h100_pcie.name == "H100 PCIe" and h100_pcie.hbm_bandwidth < h200.hbm_bandwidth
    sxm, pcie = (chips.chip_of_device_kind(f"NVIDIA A100{k}") for k in ("-SXM4-80GB", " 80GB PCIe"))
    assert (sxm.hbm_bandwidth, pcie.hbm_bandwidth) == (2.039e12, 1.935e12)
    assert chips.chip_of_device_kind("NVIDIA A100-PCIE-40GB").hbm_bytes == 40 * chips.GIB


def test_float32_compute_gets_the_float32_peak():
    for chip in chips.GPU_CHIPS.values():
        bf16, fp32 = chip.peak_for(jnp.bfloat16), chip.peak_for(jnp.float32)
        assert fp32 == chip.float32_flops and bf16 == chip.peak_flops, chip.name
        if "TF32" in chip.source and "no TF32" not in chip.source:
            # Dense TF32 runs at half the dense bfloat16 rate on every tensor-core generation
            # the table lists: a figure off by a typo or a sparse/dense mix-up breaks this.
            assert fp32 == pytest.approx(bf16 / 2, rel=0.02), chip.name
        else:  # before Ampere: float32 cores for both dtypes
            assert fp32 == bf16, chip.name
        assert chip.at_dtype("float32").peak_flops == fp32
    h200 = chips.GPU_CHIPS["H200"]
    assert (h200.peak_for("bfloat16"), h200.peak_for("float32")) == (989.5e12, 494.5e12)
    # A TPU runs a float32 matmul as one bfloat16 pass at JAX's default precision.
    v5e = chips.TPU_CHIPS["v5e"]
    assert v5e.peak_for("float32") == v5e.peak_for("bfloat16") == 197e12


def test_an_unlisted_accelerator_is_measured_with_one_line(capsys):
    cpu = jax.devices("cpu")[0]
    chip = chips.published_or_measured(
        "NVIDIA RTX PRO 6000 Blackwell", lambda: chips.measured_accelerator(cpu, small=True)
    )
    (line,) = capsys.readouterr().out.splitlines()
    assert "'NVIDIA RTX PRO 6000 Blackwell' has no published figures" in line
    assert chip.source.startswith("measured on the device") and chip.source in line
    assert chip.peak_flops > 0 and chip.float32_flops > 0 and chip.hbm_bandwidth > 0


def test_a_listed_accelerator_is_not_measured(capsys):
    def measure():
        raise AssertionError("a listed chip must not be measured")

    assert chips.published_or_measured("NVIDIA L4", measure) is chips.GPU_CHIPS["L4"]
    assert capsys.readouterr().out == ""
