"""One command for a GPU or TPU: what the CPU cannot measure, each figure beside its estimate.

  python -m benchmarks.device_check --sections=gpt2_small,multi30k

Refuses a CPU backend (one `error:` line, exit status 2: a jax without its CUDA or TPU plugin
would otherwise time the CPU; `--allow_cpu` is for the tests). Each section runs in a process of
its own, one after the other, with `XLA_PYTHON_CLIENT_PREALLOCATE=false` (this process never
starts JAX on the device, and no section holds JAX's default 75% of GPU memory while the next
one, or the seeds section's runs, start), and writes its table to `--out_dir/<section>.md`
as soon as it finishes; a section that fails or runs past `--section_timeout` (480 s) writes
why, and the next one starts. Sections, with their wall time on one H200 estimated by counting
what they run (no GPU has run them yet; a step of these models takes milliseconds there, so
process starts and compiles dominate):

  gpt2_small     benchmarks/speed_configs.py:gpt2_small (bfloat16): step time, tokens/s and MFU
                 (model FLOPs 6N + 12LTD over the chip's published peak, and over a measured
                 one). One process start and JAX compile (~1 min), 3 + 20 + 4 steps, an
                 8192^2 matmul peak: about 2 minutes.
  speed          tokens/s of speed_configs' small and medium in JAX and PyTorch eager on the
                 same device (PyTorch on a GPU only), alternating in rounds. Two JAX compiles
                 (~20 s each), 2 x 2 x 27 steps: about 2 minutes.
  torch_compile  the same two models in JAX and torch.compile: two JAX compiles and two
                 torch.compile compiles (~1-2 min each): about 5 minutes.
  seeds          the quick-start sweep's baseline variant (experiments/quickstart.py --quick,
                 three seeds) one process per seed vs one seed group (benchmarks/sweep_speed.py):
                 wall times and their ratio. Four training processes of ~30-60 s each (start,
                 compile, a quick run): about 4 minutes.
  multi30k       train steps/s of configs/multi30k.py's model on synthetic batches of its
                 longest training shape (no data needed). One compile, 3 + 30 + 6 steps: about
                 1.5 minutes.

Beside each JAX figure: the roofline estimate of the same compiled program (XLA's FLOPs and
bytes accessed over the chip's peak for the program's dtype and its bandwidth,
transformer_jax/aot/estimate.py, the method of `python -m transformer_jax.aot`) and the ratio
estimate / measured. Chip figures come from transformer_jax/aot/chips.py by exact device kind,
else they are measured on the device (one printed line says so). `--tiny` shrinks every model
(tests/test_device_check.py runs it on a CPU with `--allow_cpu`).
"""

import dataclasses
import functools
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from benchmarks import speed_configs
from benchmarks.timing import (
    JaxRunner,
    TorchRunner,
    random_tokens,
    run_rounds,
    synthetic_batches,
    typed_configs,
)
from transformer_jax import defaults, environment
from transformer_jax.aot.chips import Chip, local_chip, matmul_peak_flops
from transformer_jax.aot.estimate import model_flops_per_token, roofline
from transformer_jax.commands import one_line_errors, parse_flags, recorded_command
from transformer_jax.config import TrainConfig
from transformer_jax.data import describe_dataset
from transformer_jax.train import host_memory
from transformer_jax.train.trainer import resolve_model_config

SECTIONS = ("gpt2_small", "speed", "torch_compile", "seeds", "multi30k")
_OUT_DIR = flags.DEFINE_string(
    "out_dir", "results/speed/device_check", "Directory of the sections' tables."
)
_SECTIONS = flags.DEFINE_list("sections", list(SECTIONS), f"Which of {SECTIONS} to run.")
_TINY = flags.DEFINE_bool("tiny", False, "Tiny models and few steps: a smoke test.")
_ALLOW_CPU = flags.DEFINE_bool("allow_cpu", False, "Run on a CPU backend (tests only).")
_TIMEOUT = flags.DEFINE_integer("section_timeout", 480, "Seconds a section may run.")
_SWEEP = flags.DEFINE_string("sweep", "experiments/quickstart.py", "Sweep of the seeds section.")
_SWEEP_VARIANTS = flags.DEFINE_list(
    "sweep_variants", ["baseline"], "Variants of --sweep the seeds section runs."
)
_RUN_SECTION = flags.DEFINE_string("run_section", None, "Internal: run one section here.")

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


@functools.cache
def device_and_chip():
    """The first device and its chip's figures (published by exact kind, else measured)."""
    device = jax.devices()[0]
    return device, local_chip(device, small=_TINY.value)


def benchmark_config(name: str):
    config = speed_configs.get_config(name)
    if _TINY.value:
        config.model.update(**{k: v for k, v in TINY_SIZES.items() if "." not in k})
        config.model.attention.num_heads = TINY_SIZES["attention.num_heads"]
        config.model.ffn.d_ff = TINY_SIZES["ffn.d_ff"]
        config.model.positional.max_len = TINY_SIZES["positional.max_len"]
        config.update(seq_len=16, batch_size=4, warmup_steps=1, timed_steps=3)
    return config


def estimate_of(runner: JaxRunner, chip: Chip, dtype, tokens: int, model_flops: float | None):
    """The roofline of the runner's compiled step on `chip` at the peak of `dtype` compute."""
    cost = runner.compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, list) else cost) or {}
    return roofline(
        cost.get("flops", 0.0),
        cost.get("bytes accessed", 0.0),
        chip.at_dtype(dtype),
        tokens=tokens,
        model_flops=model_flops,
    )


def step_row(label: str, seconds: float, tokens: int, estimate, unit="tokens") -> Row:
    return Row(
        label,
        f"{seconds * 1e3:,.1f} ms/step, {tokens / seconds:,.0f} {unit}/s",
        f"{estimate.seconds * 1e3:,.1f} ms/step, {estimate.tokens_per_s:,.0f} {unit}/s "
        f"({estimate.bound}-bound)",
        f"{estimate.seconds / seconds:.2f}",
    )


def gpt2_small() -> list[Row]:
    device, chip = device_and_chip()
    config = benchmark_config("gpt2_small")
    cfg, train_config = typed_configs(config)
    batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=4)
    runner = JaxRunner(cfg, train_config, batches[0])
    times = run_rounds({"jax": runner}, batches, config.warmup_steps, config.timed_steps, 5)
    seconds = float(np.median(times["jax"]))
    tokens = config.batch_size * config.seq_len
    flops = model_flops_per_token(cfg, config.seq_len) * tokens
    estimate = estimate_of(runner, chip, cfg.dtype, tokens, flops)
    measured_peak = matmul_peak_flops(512 if _TINY.value else 8192, jnp.dtype(cfg.dtype), device)
    peak = chip.peak_for(cfg.dtype)
    return [
        step_row(
            f"gpt2_small {cfg.dtype} train step, batch {config.batch_size}",
            seconds,
            tokens,
            estimate,
        ),
        Row(
            "gpt2_small MFU (6N + 12LTD)",
            f"{flops / seconds / peak:.1%} of {peak / 1e12:,.1f} TFLOP/s ({chip.name}); "
            f"{flops / seconds / measured_peak:.1%} of the measured matmul peak "
            f"{measured_peak / 1e12:,.1f} TFLOP/s",
            f"{estimate.mfu_bound:.1%} (roofline bound)",
        ),
    ]


def frameworks(compiled: bool) -> list[Row]:
    """speed_configs' small and medium in JAX and PyTorch (eager, or `compiled`) alternating."""
    device, chip = device_and_chip()
    framework = "torch.compile" if compiled else "pytorch eager"
    torch_here = device.platform in ("gpu", "cpu")
    try:
        import torch  # noqa: F401, PLC0415 (optional: a machine may have JAX alone)
    except ImportError:
        torch_here = False
    rows = []
    for name in ("small", "medium"):
        config = benchmark_config(name)
        cfg, train_config = typed_configs(config)
        batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=4)
        runner = JaxRunner(cfg, train_config, batches[0])
        runners = {"jax": runner}
        if torch_here:
            runners[framework] = TorchRunner(cfg, train_config, runner, batches[0], compiled)
        times = run_rounds(runners, batches, config.warmup_steps, config.timed_steps, 5)
        tokens = config.batch_size * config.seq_len
        flops = model_flops_per_token(cfg, config.seq_len) * tokens
        estimate = estimate_of(runner, chip, cfg.dtype, tokens, flops)
        jax_seconds = float(np.median(times["jax"]))
        note = "" if torch_here else " (no PyTorch for this device here)"
        rows.append(step_row(f"{name} {cfg.dtype}: jax{note}", jax_seconds, tokens, estimate))
        if torch_here:
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
        f"--variants={','.join(_SWEEP_VARIANTS.value)}",
        "--parallel=1",
    ]
    if not _TINY.value:
        argv.append("--quick")
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        last = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
        raise RuntimeError(f"benchmarks.sweep_speed failed: {last[0]}")
    output = result.stdout
    walls = dict(re.findall(r"^(per_run|grouped)\s+([\d.]+)", output, re.M))
    ratio = re.search(r"^ratio: ([\d.]+)", output, re.M)[1]
    what = f"{_SWEEP.value} ({', '.join(_SWEEP_VARIANTS.value)})"
    return [
        Row(f"{what}: one process per seed", f"{float(walls['per_run']):,.1f} s wall"),
        Row(
            f"{what}: seed groups",
            f"{float(walls['grouped']):,.1f} s wall; per-seed / grouped = {ratio}",
        ),
    ]


def multi30k() -> list[Row]:
    _, chip = device_and_chip()
    config = defaults.from_file(str(ROOT / "configs" / "multi30k.py"))
    if _TINY.value:
        config.model.update(d_model=32, num_encoder_layers=1, num_decoder_layers=1)
        config.model.attention.num_heads = 2
        config.model.ffn.d_ff = 64
        config.data.update(batch_size=4, spm_vocab_size=64)
    info = describe_dataset(config.data)
    cfg = resolve_model_config(config, info)
    train_config = TrainConfig.from_dict(config.train.to_dict())
    input_len, target_len = info.padded_lengths("train")
    rng = np.random.default_rng(0)
    size = config.data.batch_size
    batches = [
        {
            "inputs": random_tokens(rng, cfg, (size, input_len)),
            "targets": random_tokens(rng, cfg, (size, target_len)),
            "example_weights": np.ones(size, np.float32),
        }
        for _ in range(4)
    ]
    runner = JaxRunner(cfg, train_config, batches[0])
    timed = 3 if _TINY.value else 30
    times = run_rounds({"jax": runner}, batches, 1 if _TINY.value else 3, timed, 5)
    seconds = float(np.median(times["jax"]))
    estimate = estimate_of(runner, chip, cfg.dtype, size * target_len, None)
    return [
        Row(
            f"multi30k {cfg.dtype} train step, batch {size} x ({input_len}, {target_len}) "
            "synthetic",
            f"{1 / seconds:,.2f} steps/s ({seconds * 1e3:,.1f} ms)",
            f"{1 / estimate.seconds:,.2f} steps/s ({estimate.bound}-bound)",
            f"{estimate.seconds / seconds:.2f}",
        )
    ]


RUNS = {
    "gpt2_small": gpt2_small,
    "speed": functools.partial(frameworks, compiled=False),
    "torch_compile": functools.partial(frameworks, compiled=True),
    "seeds": seeds,
    "multi30k": multi30k,
}


def section_flags() -> list[str]:
    """The flags a section's process gets (and its table records), beside its name."""
    return [
        f"--out_dir={_OUT_DIR.value}",
        *(["--tiny"] if _TINY.value else []),
        *(["--allow_cpu"] if _ALLOW_CPU.value else []),
        f"--sweep={_SWEEP.value}",
        f"--sweep_variants={','.join(_SWEEP_VARIANTS.value)}",
    ]


def markdown(section: str, rows: list[Row], machine: str, chip: str, elapsed: float) -> str:
    command = recorded_command(
        "benchmarks.device_check", [f"--sections={section}", *section_flags()]
    )
    lines = [
        f"# Device check: {section}",
        "",
        f"Machine: {machine}.{chip}",
        f"Command: `{command}` ({elapsed / 60:,.1f} minutes).",
        "",
        "Estimates: the roofline of the same compiled program (XLA's FLOPs and bytes accessed "
        "over the chip's peak for the program's dtype and its bandwidth, "
        "transformer_jax/aot/estimate.py); ratio = estimate / measured step time.",
        "",
        "| measurement | measured | estimate | ratio |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {r.what} | {r.measured} | {r.estimate} | {r.ratio} |" for r in rows]
    return "\n".join(lines) + "\n"


def write_section(section: str, rows: list[Row], machine: str, elapsed: float, chip="") -> Path:
    out = Path(_OUT_DIR.value) / f"{section}.md"
    out.write_text(markdown(section, rows, machine, chip, elapsed))
    return out


def describe_machine() -> str:
    """This machine, from a probe process: called while no process of the check holds the
    device (a TPU admits one process at a time)."""
    return environment.describe_machine(environment.machine_info())


def run_section(section: str) -> None:
    """One section in this process: its rows, written to its file and printed; a failure
    writes its last line as the section's row and exits 1."""
    host_memory.reuse_freed_memory()  # As the trainer does; before JAX starts its threads.
    machine = describe_machine()
    start = time.perf_counter()
    try:
        rows = RUNS[section]()
    except Exception as error:  # the section's file says why; the traceback goes to stderr
        traceback.print_exc()
        last = str(error).strip().splitlines()[-1:] or [type(error).__name__]
        row = Row(section, f"failed: {last[0]}")
        write_section(section, [row], machine, time.perf_counter() - start)
        sys.exit(1)
    chip = ""
    if device_and_chip.cache_info().currsize:  # the seeds section starts no JAX here
        chip = f" Chip figures: {device_and_chip()[1].source}."
    out = write_section(section, rows, machine, time.perf_counter() - start, chip)
    print(out.read_text(), flush=True)


def run_to_timeout(argv: list[str], timeout: float) -> int | None:
    """The exit status of `argv`, or None when it ran past `timeout` seconds: then it is killed
    with every process it started (the seeds section's runs too), which would hold the device."""
    with subprocess.Popen(argv, cwd=ROOT, start_new_session=True) as child:
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if child.returncode is None:  # timed out, or this process was interrupted
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def run_sections(sections: list[str], machine: str) -> int:
    """Each section in a child process, one after the other; the number that failed."""
    failed = 0
    for section in sections:
        print(f"device_check: {section} (at most {_TIMEOUT.value} s)", flush=True)
        argv = [sys.executable, "-m", "benchmarks.device_check", f"--run_section={section}"]
        start = time.perf_counter()
        code = run_to_timeout([*argv, *section_flags()], _TIMEOUT.value)
        if code is None:
            row = Row(section, f"timed out after {_TIMEOUT.value} s (--section_timeout)")
            write_section(section, [row], machine, time.perf_counter() - start)
        failed += code != 0
        out = Path(_OUT_DIR.value) / f"{section}.md"
        status = "written" if code == 0 else f"failed ({'timeout' if code is None else code})"
        print(f"device_check: {section} {status}: {out}", flush=True)
    return failed


def check_backend(info: dict) -> None:
    """A ValueError unless JAX starts on an accelerator (or --allow_cpu and the CPU)."""
    platform = info.get("platform", "unknown")
    if platform == "cpu" and _ALLOW_CPU.value:
        return
    if platform in ("cpu", "unknown"):
        raise ValueError(
            f"JAX's backend here is {platform!r} (jax {info.get('jax_version', '?')}, device "
            f"{info.get('device_kind', '?')!r}), not a GPU or TPU: install requirements-gpu.txt "
            "on a GPU machine (docs/accelerators.md has the command), or pass --allow_cpu for "
            "a smoke test"
        )


@one_line_errors("device_check")
def main(argv):
    del argv
    if _RUN_SECTION.value:
        run_section(_RUN_SECTION.value)
        return
    unknown = [s for s in _SECTIONS.value if s not in SECTIONS]
    if unknown or not _SECTIONS.value:
        raise ValueError(f"--sections={','.join(_SECTIONS.value)}: valid sections are {SECTIONS}")
    # Set before any JAX process starts (the probe below too): every process of the check
    # allocates GPU memory as it needs it instead of taking 75% at start.
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    info = environment.machine_info()  # in a child process: this one holds no device
    check_backend(info)
    Path(_OUT_DIR.value).mkdir(parents=True, exist_ok=True)
    sys.exit(1 if run_sections(_SECTIONS.value, environment.describe_machine(info)) else 0)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("device_check"))
