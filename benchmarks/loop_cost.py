"""What the training loop costs per step at a small batch, beside a plain PyTorch eager loop.

  python -m benchmarks.loop_cost                 # 2,000 steps: 4 layers, d_model 128, 12 x 64
  python -m benchmarks.loop_cost --steps=200     # shorter

At this size a step is tens of milliseconds on a CPU, so the loop's own per-step work (logging
window, stop agreement, data iterator, dispatch) is a visible share of it. One invocation
measures, on the same machine at about the same time:

  bare step   the trainer's jitted train step alone (benchmarks/timing.py JaxRunner: the state
              donated, a fresh host batch, a wait for each step), median over rounds that
              alternate with PyTorch's step
  trainer     `python -m transformer_jax.main --config=configs/char_lm.py` at this size for
              --steps steps, end to end: its wall time, and its time per step inside the loop
              (summary.json's "train" phase over the steps, which leaves out start-up, data,
              compilation, evaluation and checkpoints)
  pytorch     the same model, weights and optimizer in PyTorch eager (benchmarks/
              torch_reference.py), a plain loop of --steps steps, half before the trainer and
              half after it

and prints the loop's share of a trainer step, (trainer step - bare step) / trainer step, and the
ratio of the trainer's wall time to PyTorch's.
"""

import time

import numpy as np
from absl import app, flags

from benchmarks import speed_configs
from benchmarks.timing import (
    JaxRunner,
    loop_share,
    run_rounds,
    synthetic_batches,
    typed_configs,
)
from benchmarks.train_speed import TorchRunner, run_trainer
from transformer_jax.train import host_memory

_STEPS = flags.DEFINE_integer("steps", 2000, "Training steps of the trainer and of PyTorch.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 12, "Sequences per batch.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 64, "Tokens per sequence.")
_BARE_STEPS = flags.DEFINE_integer("bare_steps", 40, "Timed steps of each bare step.")


def small_batch_config(batch_size: int, seq_len: int):
    """The `small` speed preset (4 layers, d_model 128, 4 heads) at a small batch."""
    config = speed_configs.get_config("small")
    config.batch_size, config.seq_len = batch_size, seq_len
    config.model.positional.max_len = seq_len
    return config


def torch_loop_s(torch_runner: TorchRunner, batches, steps: int) -> float:
    """Wall time of `steps` PyTorch eager steps, one after another."""
    start = time.perf_counter()
    for i in range(steps):
        torch_runner.step(batches[i % len(batches)])
    return time.perf_counter() - start


def main(argv):
    del argv
    steps = _STEPS.value
    if steps < 2:
        raise ValueError(f"--steps={steps} is invalid; valid: an integer >= 2")
    host_memory.reuse_freed_memory()  # As the trainer does; before JAX starts its threads.
    config = small_batch_config(_BATCH_SIZE.value, _SEQ_LEN.value)
    cfg, train_config = typed_configs(config)
    batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=4)
    runner = JaxRunner(cfg, train_config, batches[0])
    torch_runner = TorchRunner(cfg, train_config, runner, batches[0])
    bare = run_rounds({"jax": runner, "pytorch": torch_runner}, batches, 3, _BARE_STEPS.value, 5)
    del runner
    bare_step = {name: float(np.median(times)) for name, times in bare.items()}

    half = steps // 2
    torch_s = torch_loop_s(torch_runner, batches, half)
    trainer_wall, summary, _ = run_trainer(config, cfg, train_config, steps)
    torch_s += torch_loop_s(torch_runner, batches, steps - half)

    # The first step's dispatch is timed as "compile"; its execution and the rest as "train".
    trainer_step = summary["timing"]["train"] / steps
    share = loop_share(trainer_step, bare_step["jax"])
    print(f"{config.batch_size} x {config.seq_len} tokens, {steps} steps")
    print(f"bare jitted train step: {bare_step['jax'] * 1e3:.2f} ms")
    print(
        f"trainer: wall {trainer_wall:.1f} s; {trainer_step * 1e3:.2f} ms per step in the loop; "
        f"loop share {share:.1%}; timing {summary['timing']}"
    )
    print(
        f"pytorch eager: wall {torch_s:.1f} s for {steps} steps "
        f"({torch_s / steps * 1e3:.2f} ms per step; bare step {bare_step['pytorch'] * 1e3:.2f} ms)"
    )
    print(f"wall time ratio pytorch / trainer: {torch_s / trainer_wall:.2f}")


if __name__ == "__main__":
    app.run(main)
