"""The accelerator estimates' method on hardware we have: roofline estimate vs measured step time.

  python -m benchmarks.roofline_check --config=benchmarks/speed_configs.py:small
  python -m benchmarks.roofline_check --config=benchmarks/speed_configs.py:medium

Measures this machine's float32 matmul peak and memory bandwidth (transformer_jax/aot/chips.py),
compiles the trainer's step for the CPU (benchmarks/timing.py's JaxRunner), turns XLA's FLOPs and
bytes accessed into the roofline estimate that `python -m transformer_jax.aot` makes for a TPU
(transformer_jax/aot/estimate.py), times the step, and prints both and their ratio. A ratio
below 1 is time the roofline does not see (non-matmul work below the matmul peak, dispatch,
imperfect overlap); it is the error to expect from the TPU figures' method, though not its
size on a TPU. Run it on an idle machine: the peak, the bandwidth and the step are measured one
after the other.
"""

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from benchmarks.timing import JaxRunner, run_rounds, synthetic_batches, typed_configs
from transformer_jax.aot.chips import measured_cpu
from transformer_jax.aot.estimate import model_flops_per_token, roofline
from transformer_jax.commands import parse_flags
from transformer_jax.train import host_memory

_CONFIG = config_flags.DEFINE_config_file(
    "config", "benchmarks/speed_configs.py:small", "Benchmark config."
)
_PEAK_SIZE = flags.DEFINE_integer("peak_size", 2048, "Matrix size for the matmul peak.")
_BANDWIDTH_MB = flags.DEFINE_integer("bandwidth_mb", 256, "Array size for the bandwidth, MiB.")


def check(config, peak_size: int, bandwidth_mb: int) -> dict[str, float]:
    """-> {"estimate_s", "measured_s", "ratio"} for one benchmark config, printing both."""
    cfg, train_config = typed_configs(config)
    batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=4)
    chip = measured_cpu(peak_size, bandwidth_mb)
    runner = JaxRunner(cfg, train_config, batches[0])
    cost = runner.compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, list) else cost) or {}
    tokens = config.batch_size * config.seq_len
    model_flops = model_flops_per_token(cfg, config.seq_len) * tokens
    estimate = roofline(
        cost.get("flops", 0.0),
        cost.get("bytes accessed", 0.0),
        chip,
        tokens=tokens,
        model_flops=model_flops,
    )
    times = run_rounds({"jax": runner}, batches, config.warmup_steps, config.timed_steps, 5)
    measured = float(np.median(times["jax"]))
    print(f"{config.name}: batch {config.batch_size} x {config.seq_len}; CPU {chip.source}")
    print(
        f"roofline estimate {estimate.seconds * 1e3:,.1f} ms ({estimate.bound}-bound: compute "
        f"{estimate.compute_seconds * 1e3:,.1f} ms for {cost.get('flops', 0.0) / 1e9:,.2f} "
        f"GFLOP, memory {estimate.memory_seconds * 1e3:,.1f} ms for "
        f"{cost.get('bytes accessed', 0.0) / 1e9:,.2f} GB)"
    )
    print(
        f"measured step {measured * 1e3:,.1f} ms (median of {len(times['jax'])}); "
        f"estimate / measured = {estimate.seconds / measured:.2f}"
    )
    return {"estimate_s": estimate.seconds, "measured_s": measured}


def main(argv):
    del argv
    host_memory.reuse_freed_memory()  # As the trainer does; before JAX starts its threads.
    check(_CONFIG.value, _PEAK_SIZE.value, _BANDWIDTH_MB.value)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("roofline_check"))
