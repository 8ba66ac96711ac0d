"""Timing pieces shared by the benchmarks: the trainer's step compiled ahead of time, the char LM
trainer's config at a benchmark's size and its own step alone, interleaved rounds of steps and
synthetic batches. Model FLOPs and the measured matmul peak live with the estimates that also use
them (transformer_jax/aot). Free of command-line flags, so that tests import it."""

import collections
import resource
import runpy
import time
from pathlib import Path

import jax
import numpy as np

from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.families import FAMILIES
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train import trainer
from transformer_jax.train.optimizer import make_optimizer
from transformer_jax.train.parallel import make_parallel
from transformer_jax.train.timing import Phases

CHAR_LM_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "char_lm.py"


def typed_configs(config) -> tuple[ModelConfig, TrainConfig]:
    """The typed model and train configs of a benchmark config (`speed_configs.get_config`),
    validated before anything compiles."""
    return ModelConfig.from_dict(config.model.to_dict()), TrainConfig.from_dict(
        config.train.to_dict()
    )


def random_tokens(rng, cfg: ModelConfig, shape, dtype=np.int32) -> np.ndarray:
    """int32 ids of `shape` drawn uniformly from the vocabulary less `cfg.tokens`' special ids
    (no padding, BOS or EOS). With the datasets' ids (PAD 0, BOS 1, EOS 2) the draws are
    `rng.integers(3, V, shape, dtype)`'s."""
    special = [i for i in (cfg.tokens.pad, cfg.tokens.bos, cfg.tokens.eos) if i is not None]
    ordinary = np.setdiff1d(np.arange(cfg.vocab_size), special).astype(np.int32)
    return ordinary[rng.integers(0, len(ordinary), shape, dtype=dtype)]


def synthetic_batches(cfg: ModelConfig, batch_size: int, seq_len: int, count: int):
    """`count` batches of random tokens (`random_tokens`: no padding, BOS or EOS), as numpy
    arrays."""
    rng = np.random.default_rng(0)
    return [
        {
            "targets": random_tokens(rng, cfg, (batch_size, seq_len)),
            "example_weights": np.ones(batch_size, np.float32),
        }
        for _ in range(count)
    ]


def trainer_overrides(config, cfg, train_config, steps: int) -> dict:
    """The fields of configs/char_lm.py that the benchmark preset's size and schedule set, for
    `steps` steps with 20 logging windows, one evaluation and one checkpoint at the end."""
    log_every = max(steps // 20, 1)
    return {
        "train.warmup_steps": min(train_config.warmup_steps, steps - 1),
        "train.learning_rate": train_config.learning_rate,
        "model.d_model": cfg.d_model,
        "model.attention.num_heads": cfg.attention.num_heads,
        "model.num_decoder_layers": cfg.num_decoder_layers,
        "model.ffn.d_ff": cfg.ffn.d_ff,
        "model.vocab_size": cfg.vocab_size,
        "model.dtype": cfg.dtype,
        "data.seq_len": config.seq_len,
        "data.batch_size": config.batch_size,
        "train.steps": steps,
        "train.log_every": log_every,
        "train.eval_every": steps,
        "train.checkpoint_every": log_every * (steps // log_every),
        "train.eval_examples": config.batch_size,
    }


def char_lm_config(preset, steps: int):
    """configs/char_lm.py at a benchmark preset's size and schedule (`trainer_overrides`), as
    `benchmarks.train_speed --end_to_end_steps` runs it on the command line."""
    config = runpy.run_path(str(CHAR_LM_CONFIG))["get_config"]()
    config.update_from_flattened_dict(trainer_overrides(preset, *typed_configs(preset), steps))
    return config


class TrainerStep:
    """The trainer's own compiled step for `config` (train/trainer.py `SoloProgram`, built by
    `trainer.prepare`, as `train_and_evaluate` builds it), alone: on the run's first `count`
    training batches, held in memory, the host waiting for each step."""

    def __init__(self, config, count: int = 8):
        self.prepared = trainer.prepare(config)
        parallel = make_parallel(self.prepared.train_cfg)
        self.program = trainer.SoloProgram(self.prepared, parallel, config.seed, Phases())
        train_iter = self.prepared.dataset.train_iterator(
            seed=config.seed, batch_size=config.data.batch_size
        )
        self.batches = [next(train_iter) for _ in range(count)]

    def step(self, batch) -> dict:
        """One step on `batch`, waited for; its metrics (on the device)."""
        metrics = self.program.step([batch])
        jax.block_until_ready((self.program.state(0), metrics))
        return metrics

    def run(self, steps: int, ahead: int) -> None:
        """`steps` steps on the batches in turn with at most `ahead` more dispatched than are
        known finished (0: the host waits for each step; the loop's MAX_STEPS_AHEAD: as the loop
        overlaps its host work with the steps), then waits for the last."""
        in_flight = collections.deque()
        for i in range(steps):
            in_flight.append(self.program.step([self.batches[i % len(self.batches)]]))
            if len(in_flight) > ahead:
                jax.block_until_ready(in_flight.popleft())
        jax.block_until_ready((self.program.state(0), in_flight))


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


class TorchRunner:
    """The same model in PyTorch, starting from the JAX runner's weights: eager, or with
    `compiled` its forward pass through `torch.compile` (the backward follows it)."""

    def __init__(
        self,
        cfg: ModelConfig,
        train_config: TrainConfig,
        jax_runner: JaxRunner,
        batch,
        compiled: bool = False,
    ):
        import torch

        from benchmarks import torch_reference

        self.torch = torch
        self.tokens = cfg.tokens
        self.device = "cuda" if jax.devices()[0].platform == "gpu" else "cpu"
        self.model = torch_reference.DecoderOnly(cfg)
        torch_reference.load_jax_params(self.model, jax.device_get(jax_runner.state.params))
        self.model.to(self.device)
        self.max_logit_difference = self._compare_logits(jax_runner, batch)
        self.model.train()
        optimizer = torch_reference.make_optimizer(self.model, train_config)
        forward = torch.compile(self.model) if compiled else self.model
        self.train_step = torch_reference.make_train_step(forward, optimizer, train_config)
        self.autocast = cfg.dtype == "bfloat16"

    def _compare_logits(self, jax_runner: JaxRunner, batch) -> float:
        """Largest |logit difference| of the two models on one batch, without dropout."""
        params = {"params": jax_runner.state.params}
        args, kwargs = FAMILIES["decoder_only"].inputs(batch, self.tokens)
        expected = np.asarray(jax_runner.model.apply(params, *args, **kwargs), np.float32)
        self.model.eval()
        with self.torch.no_grad():
            got = self.model(self._tensor(args[0])).float().cpu().numpy()
        return float(np.max(np.abs(got - expected)))

    def _tensor(self, array):
        return self.torch.from_numpy(np.asarray(array)).long().to(self.device)

    def step(self, batch) -> float:
        start = time.perf_counter()
        args, _ = FAMILIES["decoder_only"].inputs(batch, self.tokens)
        inputs, targets = self._tensor(args[0]), self._tensor(batch["targets"])
        with self.torch.autocast(self.device, self.torch.bfloat16, enabled=self.autocast):
            loss = self.train_step(inputs, targets)
        loss.item()  # Waits for the step, as block_until_ready does.
        return time.perf_counter() - start


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


def loop_share(trainer_step_s: float, bare_step_s: float) -> float:
    """The loop's share of a trainer step: the part the bare step does not account for."""
    return (trainer_step_s - bare_step_s) / trainer_step_s
