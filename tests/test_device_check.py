"""The accelerator checks run on CPU at tiny sizes, so they are known to work before they first
meet a GPU or TPU: the roofline check prints its estimate beside the measured step, and the
device check writes its table with an estimate beside each JAX figure."""

import subprocess
import sys
import textwrap

import pytest
from test_benchmarks import import_torch

from benchmarks import roofline_check, speed_configs


def tiny_small():
    config = speed_configs.get_config("small")
    config.model.update(d_model=32, num_decoder_layers=1)
    config.model.ffn.d_ff = 64
    config.model.positional.max_len = 16
    config.update(seq_len=16, batch_size=4, warmup_steps=1, timed_steps=3)
    return config


def test_roofline_check_prints_estimate_and_measured(capsys):
    figures = roofline_check.check(tiny_small(), peak_size=256, bandwidth_mb=8)
    printed = capsys.readouterr().out
    assert figures["estimate_s"] > 0 and figures["measured_s"] > 0
    assert "roofline estimate" in printed and "measured step" in printed
    ratio = figures["estimate_s"] / figures["measured_s"]
    assert f"estimate / measured = {ratio:.2f}" in printed


def run_device_check(tmp_path, *flags):
    out = tmp_path / "device.md"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check", "--tiny", f"--out={out}", *flags],
        check=True,
        capture_output=True,
        text=True,
    )
    table = out.read_text()
    return {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if "|" in line}


@pytest.mark.slow  # five models compiled and timed, with PyTorch: minutes on 2 cores
def test_device_check_runs_at_tiny_sizes_on_cpu(tmp_path):
    import_torch()
    rows = run_device_check(tmp_path, "--sections=gpt2_small,speed,multi30k", "--notorch_compile")
    for name in ("gpt2_small bfloat16 train step, batch 4", "small: jax", "medium: jax"):
        assert "tokens/s" in rows[name] and "-bound" in rows[name], rows
    assert "jax / pytorch eager tokens/s" in rows["small: pytorch eager"]
    assert "% of the measured matmul peak" in rows["gpt2_small MFU (6N + 12LTD)"]
    (multi30k,) = [row for name, row in rows.items() if name.startswith("multi30k")]
    assert multi30k.count("steps/s") == 2


@pytest.mark.slow
def test_device_check_every_section_on_cpu(tmp_path):
    import_torch()
    sweep = tmp_path / "tiny_sweep.py"
    sweep.write_text(
        textwrap.dedent(f'''
            """Tiny seed-group check."""
            from transformer_jax.sweep import Sweep

            def get_sweep():
                tiny = {{"train.steps": 2, "train.log_every": 1, "train.eval_every": 2,
                         "train.checkpoint_every": 2, "train.warmup_steps": 1,
                         "model.d_model": 16, "model.ffn.d_ff": 32,
                         "model.attention.num_heads": 2, "data.num_train": 32,
                         "data.num_test": 8, "data.num_test_long": 8, "data.batch_size": 8,
                         "data.data_dir": {str(tmp_path / "tfds")!r}}}
                return Sweep(config="configs/algorithmic.py", config_arg="quick",
                             variants={{"baseline": tiny}}, seeds=(0, 1),
                             metrics=("test/token_accuracy",), baseline="baseline")
        ''')
    )
    rows = run_device_check(tmp_path, f"--sweep={sweep}")
    assert "torch.compile" in "".join(rows)
    assert "per-seed / grouped = " in rows[f"{sweep}: seed groups"]
