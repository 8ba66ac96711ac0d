"""One command for a GPU or TPU: what the CPU cannot measure, each figure beside its estimate.

  python -m benchmarks.device_check --out=results/speed/device.md

About 5-8 minutes on one GPU or TPU. Measures, on the first device:

  gpt2_small  benchmarks/speed_configs.py:gpt2_small (bfloat16): step time, tokens/s and MFU
              (model FLOPs 6N + 12LTD over the chip's published peak, and over a measured one)
  small, medium  tokens/s of the trainer's step in JAX, PyTorch eager and torch.compile on the
              same device (PyTorch on a GPU or CPU only), alternating in rounds
  seeds       the quick-start sweep (experiments/quickstart.py, --quick) one process per seed
              vs seed groups: wall times and their ratio (benchmarks/sweep_speed.py)
  multi30k    train steps/s of configs/multi30k.py's model on synthetic batches of its longest
              training shape (no data needed)

Beside each JAX figure: the roofline estimate from the same compiled program's XLA counts and
the chip's published figures (transformer_jax/aot/chips.py; a CPU's are measured), the method
of `python -m transformer_jax.aot`. Writes a markdown table to --out and prints it. `--tiny`
shrinks every model for a CPU smoke test (tests/test_device_check.py).
"""

import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from benchmarks import speed_configs
from benchmarks.timing import JaxRunner, TorchRunner, run_rounds, synthetic_batches, typed_configs
from transformer_jax import defaults, environment
from transformer_jax.aot.chips import Chip, local_chip, matmul_peak_flops
from transformer_jax.aot.estimate import model_flops_per_token, roofline
from transformer_jax.aot.shapes import planned_info
from transformer_jax.config import TrainConfig
from transformer_jax.train import host_memory
from transformer_jax.train.trainer import resolve_model_config

SECTIONS = ("gpt2_small", "speed", "seeds", "multi30k")
_OUT = flags.DEFINE_string("out", "results/speed/device.md", "Markdown file to write.")
_SECTIONS = flags.DEFINE_list("sections", list(SECTIONS), f"Which of {SECTIONS} to run.")
_TINY = flags.DEFINE_bool("tiny", False, "Tiny models and few steps: a CPU smoke test.")
_TORCH_COMPILE = flags.DEFINE_bool("torch_compile", True, "Also time torch.compile.")
_SWEEP = flags.DEFINE_string("sweep", "experiments/quickstart.py", "Sweep of the seeds section.")

ROOT = Path(__file__).resolve().parents[1]
TINY_SIZES = {
    "d_model": 32,
    "attention.num_heads": 2,
    "ffn.d_ff": 64,
    "num_decoder_layers": 1,
    "vocab_size": 64,
    "positional.max_len": 16,
}


@dataclasses.dataclass
class Row:
    what: str
    measured: str
    estimate: str = "-"
    ratio: str = "-"


def benchmark_config(name: str):
    config = speed_configs.get_config(name)
    if _TINY.value:
        config.model.update(**{k: v for k, v in TINY_SIZES.items() if "." not in k})
        config.model.attention.num_heads = TINY_SIZES["attention.num_heads"]
        config.model.ffn.d_ff = TINY_SIZES["ffn.d_ff"]
        config.model.positional.max_len = TINY_SIZES["positional.max_len"]
        config.update(seq_len=16, batch_size=4, warmup_steps=1, timed_steps=3)
    return config


def estimate_of(runner: JaxRunner, chip: Chip, tokens: int, model_flops: float | None):
    cost = runner.compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, list) else cost) or {}
    return roofline(
        cost.get("flops", 0.0),
        cost.get("bytes accessed", 0.0),
        chip,
        tokens=tokens,
        model_flops=model_flops,
    )


def step_rows(label: str, seconds: float, tokens: int, estimate, unit="tokens") -> Row:
    return Row(
        label,
        f"{seconds * 1e3:,.1f} ms/step, {tokens / seconds:,.0f} {unit}/s",
        f"{estimate.seconds * 1e3:,.1f} ms/step, {estimate.tokens_per_s:,.0f} {unit}/s "
        f"({estimate.bound}-bound)",
        f"{estimate.seconds / seconds:.2f}",
    )


def gpt2_small(chip: Chip) -> list[Row]:
    config = benchmark_config("gpt2_small")
    cfg, train_config = typed_configs(config)
    batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=4)
    runner = JaxRunner(cfg, train_config, batches[0])
    times = run_rounds({"jax": runner}, batches, config.warmup_steps, config.timed_steps, 5)
    seconds = float(np.median(times["jax"]))
    tokens = config.batch_size * config.seq_len
    flops = model_flops_per_token(cfg, config.seq_len) * tokens
    estimate = estimate_of(runner, chip, tokens, flops)
    measured_peak = matmul_peak_flops(512 if _TINY.value else 8192, jnp.dtype(cfg.dtype))
    row = step_rows(
        f"gpt2_small {cfg.dtype} train step, batch {config.batch_size}", seconds, tokens, estimate
    )
    mfu = flops / seconds / chip.peak_flops
    return [
        row,
        Row(
            "gpt2_small MFU (6N + 12LTD)",
            f"{mfu:.1%} of {chip.peak_flops / 1e12:,.0f} TFLOP/s ({chip.name}); "
            f"{flops / seconds / measured_peak:.1%} of the measured matmul peak "
            f"{measured_peak / 1e12:,.1f} TFLOP/s",
            f"{estimate.mfu_bound:.1%} (roofline bound)",
        ),
    ]


def speed(chip: Chip, device) -> list[Row]:
    rows = []
    for name in ("small", "medium"):
        config = benchmark_config(name)
        cfg, train_config = typed_configs(config)
        batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=4)
        runner = JaxRunner(cfg, train_config, batches[0])
        runners = {"jax": runner}
        torch_note = ""
        if device.platform in ("gpu", "cpu"):
            runners["pytorch eager"] = TorchRunner(cfg, train_config, runner, batches[0])
            if _TORCH_COMPILE.value:
                runners["torch.compile"] = TorchRunner(
                    cfg, train_config, runner, batches[0], compiled=True
                )
        else:
            torch_note = " (PyTorch does not run on this device)"
        times = run_rounds(runners, batches, config.warmup_steps, config.timed_steps, 5)
        tokens = config.batch_size * config.seq_len
        flops = model_flops_per_token(cfg, config.seq_len) * tokens
        estimate = estimate_of(runner, chip, tokens, flops)
        jax_seconds = float(np.median(times["jax"]))
        rows.append(step_rows(f"{name}: jax{torch_note}", jax_seconds, tokens, estimate))
        for framework in [k for k in runners if k != "jax"]:
            seconds = float(np.median(times[framework]))
            rows.append(
                Row(
                    f"{name}: {framework}",
                    f"{seconds * 1e3:,.1f} ms/step, {tokens / seconds:,.0f} tokens/s",
                    f"jax / {framework} tokens/s = {seconds / jax_seconds:.2f}",
                )
            )
    return rows


def seeds() -> list[Row]:
    """benchmarks/sweep_speed.py's two ways of running a sweep, on this machine."""
    argv = [
        sys.executable,
        "-m",
        "benchmarks.sweep_speed",
        f"--sweep={_SWEEP.value}",
        "--parallel=1",
    ]
    if not _TINY.value:
        argv.append("--quick")
    output = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    walls = dict(re.findall(r"^(per_run|grouped)\s+([\d.]+)", output, re.M))
    ratio = re.search(r"^ratio: ([\d.]+)", output, re.M)[1]
    return [
        Row(f"{_SWEEP.value}: one process per seed", f"{float(walls['per_run']):,.1f} s wall"),
        Row(
            f"{_SWEEP.value}: seed groups",
            f"{float(walls['grouped']):,.1f} s wall; per-seed / grouped = {ratio}",
        ),
    ]


def multi30k(chip: Chip) -> list[Row]:
    config = defaults.from_file(str(ROOT / "configs" / "multi30k.py"))
    if _TINY.value:
        config.model.update(d_model=32, num_encoder_layers=1, num_decoder_layers=1)
        config.model.attention.num_heads = 2
        config.model.ffn.d_ff = 64
        config.data.update(batch_size=4, spm_vocab_size=64)
    info = planned_info(config.data)
    cfg = resolve_model_config(config, info)
    train_config = TrainConfig.from_dict(config.train.to_dict())
    input_len, target_len = info.padded_lengths("train")
    rng = np.random.default_rng(0)
    size = config.data.batch_size
    batches = [
        {
            "inputs": rng.integers(3, cfg.vocab_size, (size, input_len), dtype=np.int32),
            "targets": rng.integers(3, cfg.vocab_size, (size, target_len), dtype=np.int32),
            "example_weights": np.ones(size, np.float32),
        }
        for _ in range(4)
    ]
    runner = JaxRunner(cfg, train_config, batches[0])
    timed = 3 if _TINY.value else 30
    times = run_rounds({"jax": runner}, batches, 1 if _TINY.value else 3, timed, 5)
    seconds = float(np.median(times["jax"]))
    estimate = estimate_of(runner, chip, size * target_len, None)
    return [
        Row(
            f"multi30k train step, batch {size} x ({input_len}, {target_len}) synthetic",
            f"{1 / seconds:,.2f} steps/s ({seconds * 1e3:,.1f} ms)",
            f"{1 / estimate.seconds:,.2f} steps/s ({estimate.bound}-bound)",
            f"{estimate.seconds / seconds:.2f}",
        )
    ]


def markdown(rows: list[Row], device, chip: Chip, elapsed: float) -> str:
    machine = environment.describe_machine(environment.machine_info())
    lines = [
        "# Device check",
        "",
        f"Device: {jax.device_count()} x {device.device_kind} ({device.platform}), jax "
        f"{jax.__version__}; host {machine}. Chip figures: {chip.source}.",
        f"Command: `python -m benchmarks.device_check {' '.join(sys.argv[1:])}` "
        f"({elapsed / 60:,.1f} minutes).",
        "",
        "Estimates: the roofline of the same compiled program (XLA's FLOPs and bytes accessed "
        "over the chip's peak and bandwidth, transformer_jax/aot/estimate.py); ratio = "
        "estimate / measured step time.",
        "",
        "| measurement | measured | estimate | ratio |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {r.what} | {r.measured} | {r.estimate} | {r.ratio} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    host_memory.reuse_freed_memory()
    unknown = set(_SECTIONS.value) - set(SECTIONS)
    if unknown:
        raise app.UsageError(f"--sections={_SECTIONS.value}: valid sections are {SECTIONS}")
    start = time.perf_counter()
    device = jax.devices()[0]
    chip = local_chip(device, small=_TINY.value)
    rows = []
    if "gpt2_small" in _SECTIONS.value:
        rows += gpt2_small(chip)
    if "speed" in _SECTIONS.value:
        rows += speed(chip, device)
    if "seeds" in _SECTIONS.value:
        rows += seeds()
    if "multi30k" in _SECTIONS.value:
        rows += multi30k(chip)
    text = markdown(rows, device, chip, time.perf_counter() - start)
    out = Path(_OUT.value)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    app.run(main)
