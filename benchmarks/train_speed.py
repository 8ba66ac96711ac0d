"""Training speed of one decoder-only config, optionally side by side with PyTorch eager.

  python -m benchmarks.train_speed --config=benchmarks/speed_configs.py:small --torch
  python -m benchmarks.train_speed --config=benchmarks/speed_configs.py:medium --torch
  python -m benchmarks.train_speed --config=benchmarks/speed_configs.py:gpt2_small   # GPU/TPU
  python -m benchmarks.train_speed --config=benchmarks/speed_configs.py:small \
      --config.model.positional.kind=rotary --config.batch_size=16

Prints compile time, step time (median of `timed_steps` after `warmup_steps`), tokens per
second, model FLOPs per token (6 N + 12 L T D, as in the PaLM paper's MFU) and XLA's own count,
achieved FLOP/s and its ratio to a matrix-multiply peak measured on the same device (model FLOPs
utilisation), and memory. The step timed is the trainer's: `transformer_jax.train.step.train_step`
under jit with the state donated, a fresh host batch every step.

With --torch the same model is built in PyTorch (benchmarks/torch_reference.py), loaded with the
same initial weights (the logits are compared before timing), and trained with the same optimizer
and learning rates on the same batches; the two alternate in rounds of `--round_steps` steps so
that a change in the machine's load affects both alike, and the ratio of tokens/s is printed.

With --end_to_end_steps=N the JAX side is the whole trainer instead of the bare step:
`python -m transformer_jax.main --config=configs/char_lm.py` at the preset's size (model, batch,
context, vocabulary) trains N steps on the char LM's text, its data pipeline, logging, metrics
and checkpoints included, and its tokens/s is the median of its logging windows (less the
first, which compiles), as summary.json reports it; PyTorch eager trains N / 2 steps before it
and N / 2 after it, so that both see the same machine. Also printed: the trainer's time
breakdown and its step rate in the last quarter of the run against the first.

  python -m benchmarks.train_speed --config=benchmarks/speed_configs.py:small --end_to_end_steps=600
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from benchmarks.timing import (
    JaxRunner,
    TorchRunner,
    run_rounds,
    synthetic_batches,
    trainer_overrides,
    typed_configs,
)
from transformer_jax.aot.chips import matmul_peak_flops
from transformer_jax.aot.estimate import model_flops_per_token
from transformer_jax.commands import parse_flags
from transformer_jax.train import host_memory
from transformer_jax.train import step as steps

_CONFIG = config_flags.DEFINE_config_file(
    "config", "benchmarks/speed_configs.py:small", "Benchmark config."
)
_TORCH = flags.DEFINE_bool("torch", False, "Also time the same model in PyTorch eager.")
_ROUND_STEPS = flags.DEFINE_integer("round_steps", 5, "Steps per round when alternating.")
_END_TO_END_STEPS = flags.DEFINE_integer(
    "end_to_end_steps", 0, "Time transformer_jax.main end to end for this many steps (see above)."
)
_PEAK_SIZE = flags.DEFINE_integer(
    "peak_size", 0, "Matrix size for the matmul peak; 0 = 2048 on CPU, 8192 on accelerators."
)


def trainer_command(config, cfg, train_config, steps: int, workdir: str) -> list[str]:
    """transformer_jax.main on configs/char_lm.py at the benchmark preset's size and schedule."""
    overrides = trainer_overrides(config, cfg, train_config, steps)
    return [
        sys.executable,
        "-m",
        "transformer_jax.main",
        "--config=configs/char_lm.py",
        f"--workdir={workdir}",
        *(f"--config.{key}={value}" for key, value in overrides.items()),
    ]


def run_trainer(config, cfg, train_config, steps: int) -> tuple[float, dict, list[dict]]:
    """Runs `trainer_command` in a temporary directory -> (wall time in seconds, its
    summary.json, its metrics.jsonl lines)."""
    with tempfile.TemporaryDirectory() as workdir:
        command = trainer_command(config, cfg, train_config, steps, workdir)
        print("trainer:", " ".join(command[1:]), flush=True)
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        summary = json.loads((Path(workdir) / "summary.json").read_text())
        lines = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return wall, summary, lines


def end_to_end(config, cfg, train_config, steps: int) -> None:
    """Prints the trainer's end-to-end tokens/s beside PyTorch eager's, measured around it."""
    batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=4)
    runner = JaxRunner(cfg, train_config, batches[0])
    torch_runner = TorchRunner(cfg, train_config, runner, batches[0])
    del runner  # Its compiled step and state: only the weights were needed.
    half = max(steps // 2, config.warmup_steps + 1)
    torch_times = run_rounds({"pytorch": torch_runner}, batches, config.warmup_steps, half, half)

    wall, summary, lines = run_trainer(config, cfg, train_config, steps)
    torch_times["pytorch"] += run_rounds(
        {"pytorch": torch_runner}, batches, config.warmup_steps, half, half
    )["pytorch"]

    windows = [m["tokens_per_sec"] for m in lines if m["split"] == "train"][1:]
    quarter = max(len(windows) // 4, 1)
    first, last = np.mean(windows[:quarter]), np.mean(windows[-quarter:])
    trainer_rate = summary["tokens_per_sec"]
    torch_rate = config.batch_size * config.seq_len / float(np.median(torch_times["pytorch"]))
    print(f"trainer wall time {wall:.1f} s for {steps} steps; {summary['timing']}")
    print(
        f"trainer: {trainer_rate:,.0f} tokens/s (median of {len(windows)} windows); first "
        f"quarter {first:,.0f}, last quarter {last:,.0f} ({last / first - 1:+.1%})"
    )
    print(f"pytorch eager: {torch_rate:,.0f} tokens/s ({2 * half} steps, half before, half after)")
    print(f"tokens/s ratio trainer / pytorch: {trainer_rate / torch_rate:.2f}")


def main(argv):
    del argv
    config = _CONFIG.value
    host_memory.reuse_freed_memory()  # As the trainer does; before JAX starts its threads.
    cfg, train_config = typed_configs(config)  # Validated here, before anything compiles.
    seq_len, batch_size = config.seq_len, config.batch_size
    if seq_len > cfg.positional.max_len:
        raise ValueError(
            f"seq_len={seq_len} exceeds model.positional.max_len={cfg.positional.max_len}"
        )
    if _END_TO_END_STEPS.value:
        end_to_end(config, cfg, train_config, _END_TO_END_STEPS.value)
        return
    device = jax.devices()[0]
    tokens = batch_size * seq_len
    print(
        f"{config.name}: {cfg.num_decoder_layers} layers, d_model {cfg.d_model}, "
        f"{cfg.attention.num_heads} heads, batch {batch_size} x {seq_len}, {cfg.dtype}, "
        f"on {device.platform} ({device.device_kind}), jax {jax.__version__}"
    )
    batches = synthetic_batches(cfg, batch_size, seq_len, count=4)

    runner = JaxRunner(cfg, train_config, batches[0])
    print(f"parameters: {steps.count_params(runner.state.params):,}")
    print(f"trace + lower: {runner.trace_s:.2f} s, compile: {runner.compile_s:.2f} s")
    runners = {"jax": runner}
    if _TORCH.value:
        import torch

        torch_runner = TorchRunner(cfg, train_config, runner, batches[0])
        print(
            f"pytorch {torch.__version__} ({torch.get_num_threads()} threads): max |logit "
            f"difference| at initialisation {torch_runner.max_logit_difference:.2e}"
        )
        runners["pytorch"] = torch_runner
    times = run_rounds(
        runners, batches, config.warmup_steps, config.timed_steps, _ROUND_STEPS.value
    )

    flops_per_token = model_flops_per_token(cfg, seq_len)
    xla_flops = runner.xla_flops()
    peak_size = _PEAK_SIZE.value or (2048 if device.platform == "cpu" else 8192)
    peak_dtype = jnp.dtype(cfg.dtype)
    peak = matmul_peak_flops(peak_size, peak_dtype)
    print(
        f"model FLOPs per token: {flops_per_token / 1e6:,.2f} M (6 N + 12 L T D)"
        + (f"; XLA counts {xla_flops / tokens / 1e6:,.2f} M" if xla_flops else "")
    )
    print(f"matmul peak ({peak_size}^2 {peak_dtype.name}): {peak / 1e12:,.3f} TFLOP/s")
    rates = {}
    for name, seconds in times.items():
        median = float(np.median(seconds))
        rates[name] = tokens / median
        achieved = flops_per_token * rates[name]
        spread = f"{np.percentile(seconds, 10) * 1e3:.1f}-{np.percentile(seconds, 90) * 1e3:.1f}"
        print(
            f"{name:>8}: step {median * 1e3:,.1f} ms (p10-p90 {spread} ms), "
            f"{rates[name]:,.0f} tokens/s, {achieved / 1e12:,.3f} TFLOP/s, "
            f"MFU {achieved / peak:.1%}"
        )
    for line in runner.memory_lines():
        print(line)
    if "pytorch" in rates:
        print(f"tokens/s ratio jax / pytorch: {rates['jax'] / rates['pytorch']:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("train_speed"))
