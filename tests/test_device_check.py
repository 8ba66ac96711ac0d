"""The accelerator checks run on CPU at tiny sizes, so they are known to work before they first
meet a GPU or TPU: the roofline check prints its estimate beside the measured step; the device
check refuses a CPU backend unless told otherwise, and writes each section's table, with an
estimate beside each JAX figure, before the next section starts."""

import os
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


def device_check(tmp_path, *flags, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check", f"--out_dir={tmp_path / 'out'}", *flags],
        capture_output=True,
        text=True,
        env=env,
    )


def section_rows(tmp_path, section: str) -> dict[str, str]:
    """A section's table, row label -> row."""
    table = (tmp_path / "out" / f"{section}.md").read_text()
    return {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if "|" in line}


def test_device_check_refuses_a_cpu_backend_in_one_line(tmp_path):
    # JAX left to choose its platform, beside libtpu if installed: still one line, no noise.
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    result = device_check(tmp_path, "--sections=multi30k", env=env)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("device_check: error: JAX's backend here is 'cpu'")
    assert "requirements-gpu.txt" in line and "--allow_cpu" in line
    assert result.stdout == "" and not (tmp_path / "out").exists()


def test_device_check_refuses_an_unknown_section(tmp_path):
    result = device_check(tmp_path, "--sections=multi30k,gpt3", "--allow_cpu")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("device_check: error: --sections=multi30k,gpt3: valid sections are")


@pytest.mark.slow  # two section processes, one compiling a model: a minute or two on 2 cores
def test_a_section_is_written_before_the_next_starts(tmp_path):
    """A later section that fails keeps the earlier section's table, written when it ended."""
    missing = tmp_path / "no_such_sweep.py"
    result = device_check(
        tmp_path, "--tiny", "--allow_cpu", "--sections=multi30k,seeds", f"--sweep={missing}"
    )
    assert result.returncode == 1, result.stderr
    (multi30k,) = [row for name, row in section_rows(tmp_path, "multi30k").items() if "x (" in name]
    assert multi30k.count("steps/s") == 2 and "-bound" in multi30k
    assert "benchmarks.sweep_speed failed" in section_rows(tmp_path, "seeds")["seeds"]
    out = result.stdout
    assert out.index("multi30k written") < out.index("seeds (at most") < out.index("seeds failed")


@pytest.mark.slow  # five models compiled and timed, with PyTorch: minutes on 2 cores
def test_device_check_runs_at_tiny_sizes_on_cpu(tmp_path):
    import_torch()
    result = device_check(tmp_path, "--tiny", "--allow_cpu", "--sections=gpt2_small,speed,multi30k")
    assert result.returncode == 0, result.stderr
    gpt2 = section_rows(tmp_path, "gpt2_small")
    speed = section_rows(tmp_path, "speed")
    for row in (gpt2["gpt2_small bfloat16 train step, batch 4"], *speed.values()):
        if "jax" in row.split(" | ")[0]:
            assert "tokens/s" in row and "-bound" in row, row
    assert "jax / pytorch eager tokens/s" in speed["small: pytorch eager"]
    assert "% of the measured matmul peak" in gpt2["gpt2_small MFU (6N + 12LTD)"]
    (multi30k,) = [row for name, row in section_rows(tmp_path, "multi30k").items() if "x (" in name]
    assert multi30k.count("steps/s") == 2


@pytest.mark.slow
def test_device_check_every_section_on_cpu(tmp_path):
    """Every section in order; the seeds section's sweep, loaded last, checks that each earlier
    section's table was on disk before it started."""
    import_torch()
    earlier = [tmp_path / "out" / f"{s}.md" for s in ("gpt2_small", "speed", "torch_compile")]
    sweep = tmp_path / "tiny_sweep.py"
    sweep.write_text(
        textwrap.dedent(f'''
            """Tiny seed-group check."""
            from pathlib import Path

            from transformer_jax.sweep import Sweep

            def get_sweep():
                for path in {[str(p) for p in earlier]!r}:
                    assert Path(path).exists(), f"{{path}} was not written before seeds"
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
    result = device_check(tmp_path, "--tiny", "--allow_cpu", f"--sweep={sweep}")
    assert result.stdout.index("seeds (at most") > result.stdout.index("torch_compile written")
    assert result.returncode == 0, result.stderr
    assert (
        "jax / torch.compile tokens/s"
        in section_rows(tmp_path, "torch_compile")["small: torch.compile"]
    )
    seeds = section_rows(tmp_path, "seeds")
    assert "per-seed / grouped = " in seeds[f"{sweep} (baseline): seed groups"]
