"""Timing pieces shared by the benchmarks: the trainer's step compiled ahead of time, interleaved
rounds of steps, synthetic batches, model FLOPs and a measured matmul peak."""

import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.optimizer import make_optimizer


def typed_configs(config) -> tuple[ModelConfig, TrainConfig]:
    """The typed model and train configs of a benchmark config (`speed_configs.get_config`),
    validated before anything compiles."""
    return ModelConfig.from_dict(config.model.to_dict()), TrainConfig.from_dict(
        config.train.to_dict()
    )


def model_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Training FLOPs per token of a decoder-only model: 6 N + 12 L T (N_heads H).

    N counts the weights of every matrix multiply (attention projections, feed-forward, output
    layer; not the embedding lookup, biases or norms); 6 = 2 (multiply-add) x 3 (forward, and a
    backward twice as costly). 12 L T N_heads H is attention's QK^T and AV over the whole T x T
    square, the PaLM paper's convention (appendix B), which ignores that causal masking could
    skip half of it.
    """
    if cfg.family != "decoder_only":
        raise ValueError(f"model.family={cfg.family!r}: FLOPs are counted for decoder_only only")
    attention, ffn = cfg.attention, cfg.ffn
    inner, kv_inner = attention.num_heads * cfg.head_dim, attention.kv_heads * cfg.head_dim
    ffn_matrices = 3 if ffn.activation == "swiglu" else 2
    per_layer = cfg.d_model * (2 * inner + 2 * kv_inner) + ffn_matrices * cfg.d_model * ffn.d_ff
    matmul_weights = cfg.num_decoder_layers * per_layer + cfg.d_model * cfg.vocab_size
    attention = 12 * cfg.num_decoder_layers * seq_len * inner
    return 6 * matmul_weights + attention


def matmul_peak_flops(size: int, dtype) -> float:
    """FLOP/s of the best of several (size x size) @ (size x size) products on the device."""
    keys = jax.random.split(jax.random.key(0))
    a, b = (jax.random.normal(k, (size, size), dtype) for k in keys)
    matmul = jax.jit(jnp.matmul)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def synthetic_batches(cfg: ModelConfig, batch_size: int, seq_len: int, count: int):
    """`count` batches of random tokens (ids 3..V-1: no padding, BOS or EOS), as numpy arrays."""
    rng = np.random.default_rng(0)
    return [
        {
            "targets": rng.integers(3, cfg.vocab_size, (batch_size, seq_len), dtype=np.int32),
            "example_weights": np.ones(batch_size, np.float32),
        }
        for _ in range(count)
    ]


class JaxRunner:
    """The trainer's step, compiled ahead of time so that compilation is timed on its own."""

    def __init__(self, cfg: ModelConfig, train_config: TrainConfig, batch):
        self.model = build_model(cfg)
        self.optimizer = make_optimizer(train_config, cfg.d_model)
        self.state = steps.init_state(self.model, self.optimizer, batch, jax.random.key(0))
        step = steps.make_train_step(self.model, self.optimizer, train_config, num_devices=1)
        start = time.perf_counter()
        lowered = jax.jit(step, donate_argnums=0).lower(self.state, batch)
        self.trace_s = time.perf_counter() - start
        start = time.perf_counter()
        self.compiled = lowered.compile()
        self.compile_s = time.perf_counter() - start

    def step(self, batch) -> float:
        start = time.perf_counter()
        self.state, metrics = self.compiled(self.state, batch)
        jax.block_until_ready((self.state, metrics))
        return time.perf_counter() - start

    def xla_flops(self) -> float | None:
        analysis = self.compiled.cost_analysis()
        analysis = analysis[0] if isinstance(analysis, list) else analysis
        return (analysis or {}).get("flops")

    def memory_lines(self) -> list[str]:
        lines = []
        analysis = self.compiled.memory_analysis()
        if analysis is not None:
            mib = lambda n: n / 2**20
            lines.append(
                f"XLA step memory: arguments {mib(analysis.argument_size_in_bytes):,.1f} MiB, "
                f"temporaries {mib(analysis.temp_size_in_bytes):,.1f} MiB, "
                f"outputs {mib(analysis.output_size_in_bytes):,.1f} MiB "
                f"(aliased with arguments {mib(analysis.alias_size_in_bytes):,.1f} MiB)"
            )
        stats = jax.devices()[0].memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            lines.append(f"device peak memory: {stats['peak_bytes_in_use'] / 2**30:,.2f} GiB")
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux.
        lines.append(f"process peak resident memory: {peak_rss:,.0f} MiB")
        return lines


def run_rounds(runners: dict, batches, warmup: int, timed: int, round_steps: int) -> dict:
    """Per-step seconds of each runner, the runners alternating every `round_steps` steps."""
    times = {name: [] for name in runners}
    for runner in runners.values():
        for i in range(warmup):
            runner.step(batches[i % len(batches)])
    done = 0
    while done < timed:
        count = min(round_steps, timed - done)
        for name, runner in runners.items():
            # One untimed step first: the other framework's threads may still be spinning.
            runner.step(batches[done % len(batches)])
            for i in range(done, done + count):
                times[name].append(runner.step(batches[i % len(batches)]))
        done += count
    return times
