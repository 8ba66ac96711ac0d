"""Scale-out figures: compile time with and without nn.scan, memory with and without remat, and
throughput on 1 vs N devices.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m benchmarks.scale

Simulated CPU devices share the host's cores, so the 1-vs-8 throughput shows the overhead of
the sharded program, not a speed-up; on a TPU or multi-GPU host the same script measures the
real thing. Memory is XLA's compiled estimate (`memory_analysis()`) of one train step.
"""

import argparse
import functools
import time

import jax
import numpy as np

from benchmarks.timing import random_tokens
from transformer_jax.config import (
    AttentionConfig,
    FeedForwardConfig,
    ModelConfig,
    PositionalConfig,
    TrainConfig,
)
from transformer_jax.models import build_model
from transformer_jax.train import parallel as par
from transformer_jax.train import step as steps
from transformer_jax.train.optimizer import make_optimizer


def setup(layers: int, *, batch: int, seq: int, d_model: int, **fields):
    cfg = ModelConfig(
        family="decoder_only",
        vocab_size=256,
        d_model=d_model,
        attention=AttentionConfig(num_heads=4),
        ffn=FeedForwardConfig(d_ff=4 * d_model),
        num_decoder_layers=layers,
        positional=PositionalConfig(max_len=seq),
        dropout_rate=0.0,
        **fields,
    )
    model = build_model(cfg)
    optimizer = make_optimizer(TrainConfig(), cfg.d_model)
    targets = random_tokens(np.random.default_rng(0), cfg, (batch, seq), dtype=np.int64)
    data = {"targets": targets, "example_weights": np.ones(batch, np.float32)}
    state = jax.eval_shape(lambda: steps.init_state(model, optimizer, data, jax.random.key(0)))
    step = functools.partial(steps.train_step, model=model, optimizer=optimizer, label_smoothing=0)
    return step, state, data


def compile_seconds(layers: int, scan: bool) -> float:
    step, state, data = setup(layers, batch=8, seq=64, d_model=64, scan_layers=scan)
    start = time.perf_counter()
    jax.jit(step).lower(state, data).compile()
    return time.perf_counter() - start


def step_memory_mb(remat: str, scan: bool) -> float:
    step, state, data = setup(8, batch=32, seq=256, d_model=128, remat=remat, scan_layers=scan)
    analysis = jax.jit(step).lower(state, data).compile().memory_analysis()
    return analysis.temp_size_in_bytes / 2**20


def tokens_per_second(devices: int, repeats: int) -> float:
    step, _, data = setup(4, batch=32, seq=64, d_model=64)
    layout = par.Parallel("jit", par.make_mesh(1, jax.devices()[:devices]))
    model, optimizer = step.keywords["model"], step.keywords["optimizer"]
    state = layout.place_state(steps.init_state(model, optimizer, data, jax.random.key(0)))
    train_fn = layout.compile_train(step, state)
    state, metrics = train_fn(state, data)  # Compile.
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(repeats):
        state, metrics = train_fn(state, data)
    jax.block_until_ready(metrics)
    return repeats * data["targets"].size / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="2,8,24", help="Depths for the compile-time table.")
    parser.add_argument("--repeats", type=int, default=10, help="Timed steps per throughput.")
    args = parser.parse_args()
    print(f"{jax.device_count()} {jax.devices()[0].platform} device(s)")
    compile_seconds(1, False)  # The first compile in a process also pays one-time setup.
    print("compile time of one train step (s), d_model=64:")
    print(f"  {'layers':>6} {'unrolled':>9} {'scan':>7}")
    for layers in map(int, args.layers.split(",")):
        unrolled, scanned = compile_seconds(layers, False), compile_seconds(layers, True)
        print(f"  {layers:>6} {unrolled:>9.2f} {scanned:>7.2f}")
    print("temporary memory of one train step (MiB), 8 layers, d_model=128, B=32, T=256:")
    for remat in ("none", "dots_saveable", "full"):
        cells = "  ".join(
            f"{'scan' if scan else 'unrolled'} {step_memory_mb(remat, scan):7.1f}"
            for scan in (False, True)
        )
        print(f"  remat={remat:<14} {cells}")
    print("throughput (tokens/s), 4 layers, d_model=64, B=32, T=64, data parallel:")
    for devices in sorted({1, jax.device_count()}):
        print(f"  {devices} device(s): {tokens_per_second(devices, args.repeats):,.0f}")


if __name__ == "__main__":
    main()
