"""What the training loop costs per step at a small batch, beside a plain PyTorch eager loop.

  python -m benchmarks.loop_cost                     # 3 rounds of 500 trainer steps, 12 x 64
  python -m benchmarks.loop_cost --steps=200 --rounds=2 --nopytorch

At this size a step is tens of milliseconds on a CPU, so the loop's own per-step work (logging
window, data iterator, bookkeeping) could be a visible share of it. Like for like, in one
process:

  bare        the trainer's own compiled step (train/trainer.py `SoloProgram`, built by
              `trainer.prepare` from the very config the trainer runs: configs/char_lm.py at the
              `small` preset's size and --batch_size x --seq_len), stepped on the run's first
              training batches, held in memory: no loop, no data pipeline, no logging. Twice:
              "waiting", the host waiting for each step, and "ahead", with as many steps in
              flight as the loop keeps (train/loop.py MAX_STEPS_AHEAD), so that the host's
              dispatch overlaps the steps as in the loop
  trainer     `trainer.train_and_evaluate` on that config for --steps steps, its time per step
              inside the loop: the "train" phase (train/timing.py) over the steps, which leaves
              out start-up, data, compilation, evaluation and checkpoints
  no-work     the same loop on a program whose steps do no work after the first
  loop        (`NoWorkProgram`): the loop's own host work per step, measured directly
  pytorch     the same model, initial weights and optimizer in PyTorch eager
              (benchmarks/torch_reference.py), a plain loop waiting for each step's loss

Both JAX programs come from one persistent compilation cache, so they are the same executable
(tests/test_benchmarks.py checks that the bare step's losses are the trainer's). Each figure is
a mean over contiguous steps (a mean of the trainer's steps against a median of bare ones would
count the machine's slow steps as the loop's), and they alternate in rounds, bare, pytorch,
trainer, no-work loop, ..., bare, pytorch, so that a change in the machine's load touches all;
printed are the medians over rounds and their range. Beside the wall time each gets its process
CPU time per step (every thread: XLA's, the data prefetch's, the loop's): on a machine with few
cores any host work takes cores from the step's threads, so the loop's cost is its CPU time as
well as its critical path. The loop's share of a trainer step is (trainer - bare) / trainer, of
the wall time and of the CPU time, against "ahead"; "waiting" shows what the overlap is worth.

`python -m benchmarks.train_speed --end_to_end_steps=N` times the command-line trainer end to
end (start-up included) against PyTorch instead.
"""

import contextlib
import io
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
from absl import app, flags, logging

from benchmarks import speed_configs
from benchmarks.timing import TorchRunner, TrainerStep, char_lm_config, loop_share
from transformer_jax.commands import parse_flags
from transformer_jax.train import host_memory, trainer
from transformer_jax.train.loop import MAX_STEPS_AHEAD, train_runs
from transformer_jax.train.timing import Phases

_STEPS = flags.DEFINE_integer("steps", 500, "Training steps of each trainer round.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Trainer rounds; bare and PyTorch get one more.")
_BARE_STEPS = flags.DEFINE_integer("bare_steps", 200, "Steps of each bare and PyTorch round.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 12, "Sequences per batch.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 64, "Tokens per sequence.")
_PYTORCH = flags.DEFINE_bool("pytorch", True, "Also time PyTorch eager (requirements-bench.txt).")


def small_batch_config(batch_size: int, seq_len: int):
    """The `small` speed preset (4 layers, d_model 128, 4 heads) at a small batch."""
    config = speed_configs.get_config("small")
    config.batch_size, config.seq_len = batch_size, seq_len
    config.model.positional.max_len = seq_len
    return config


class Rounds:
    """Per-step wall and CPU seconds of each round of one contestant."""

    def __init__(self):
        self.wall, self.cpu = [], []

    def add(self, wall_s: float, cpu_s: float, steps: int) -> None:
        self.wall.append(wall_s / steps)
        self.cpu.append(cpu_s / steps)

    def line(self) -> str:
        ms = lambda values: f"{np.median(values) * 1e3:.2f} ms"
        spread = f"{min(self.wall) * 1e3:.2f}-{max(self.wall) * 1e3:.2f}"
        return f"{ms(self.wall)} (rounds {spread}), CPU {ms(self.cpu)} per step"


def timed_round(run: Callable[[int], None], steps: int, rounds: Rounds) -> None:
    """`run(steps)` timed, after an untimed `run(1)` (the other framework's threads may still be
    spinning)."""
    run(1)
    start, cpu_start = time.perf_counter(), time.process_time()
    run(steps)
    rounds.add(time.perf_counter() - start, time.process_time() - cpu_start, steps)


class NoWorkProgram(trainer.SoloProgram):
    """The trainer's program with a step that does no work after its first: it returns the first
    step's metrics (finished, on the device) again, so that a step of the loop costs the loop's
    own host work alone: data iterator, bookkeeping, logging windows (which then fetch the same
    arrays each time, a little cheaper than fresh ones), dispatch left out."""

    _metrics = None

    def step(self, batches):
        if self._metrics is None:
            self._metrics = jax.block_until_ready(super().step(batches))
        return self._metrics


def trainer_round(config, rounds: Rounds, *, no_work: bool = False) -> None:
    """One run of the trainer in a fresh directory, its console output discarded: the trainer
    itself (`train_and_evaluate`), or with `no_work` its loop on a `NoWorkProgram`."""
    phases = Phases()
    with tempfile.TemporaryDirectory() as workdir, contextlib.redirect_stdout(io.StringIO()):
        if no_work:
            prepared = trainer.prepare(config, phases)

            def make_program(parallel, seeds, phases):
                return NoWorkProgram(prepared, parallel, seeds[0], phases)

            workdirs = [Path(workdir)]
            (summary,) = train_runs(prepared, [config.seed], workdirs, make_program, phases)
        else:
            summary = trainer.train_and_evaluate(config, workdir, phases)
    if summary.status != "finished":
        raise RuntimeError(f"the trainer's run ended {summary.status!r}: {summary.error}")
    rounds.add(phases.breakdown()["train"], phases.cpu_seconds()["train"], summary.step)


def main(argv):
    del argv
    for name, flag, least in (("steps", _STEPS, 2), ("rounds", _ROUNDS, 1)):
        if flag.value < least:
            raise ValueError(f"--{name}={flag.value} is invalid; valid: an integer >= {least}")
    logging.set_verbosity(logging.WARNING)  # As the trainer's command line: orbax logs files.
    host_memory.reuse_freed_memory()  # As the trainer does; before JAX starts its threads.
    preset = small_batch_config(_BATCH_SIZE.value, _SEQ_LEN.value)
    config = char_lm_config(preset, _STEPS.value)
    tokens = f"{config.data.batch_size} x {config.data.seq_len} tokens"
    print(f"{tokens}: configs/char_lm.py at the small preset's size, {_STEPS.value} steps a run")
    names = ("waiting", "ahead", "pytorch", "trainer", "no-work loop")
    rounds = {name: Rounds() for name in names}
    with tempfile.TemporaryDirectory() as cache_dir:
        config.train.compilation_cache_dir = cache_dir  # One executable for bare and trainer.
        bare = TrainerStep(config)
        contestants = {
            "waiting": lambda steps: bare.run(steps, ahead=0),
            "ahead": lambda steps: bare.run(steps, ahead=MAX_STEPS_AHEAD),
        }
        if _PYTORCH.value:
            prepared = bare.prepared
            initial = types.SimpleNamespace(model=prepared.model, state=bare.program.state(0))
            torch_runner = TorchRunner(
                prepared.model_config, prepared.train_cfg, initial, bare.batches[0]
            )

            def torch_steps(steps: int) -> None:
                for i in range(steps):
                    torch_runner.step(bare.batches[i % len(bare.batches)])

            contestants["pytorch"] = torch_steps
        for i in range(_ROUNDS.value + 1):
            for name, run in contestants.items():
                timed_round(run, _BARE_STEPS.value, rounds[name])
            if i < _ROUNDS.value:
                trainer_round(config, rounds["trainer"])
                trainer_round(config, rounds["no-work loop"], no_work=True)
            shown = [f"{n} {r.wall[-1] * 1e3:.2f}" for n, r in rounds.items() if len(r.wall) > i]
            print(f"round {i + 1} (ms per step): {', '.join(shown)}", flush=True)

    in_loop = rounds["trainer"]
    print(
        f"medians over {_ROUNDS.value} trainer rounds of {_STEPS.value} steps and "
        f"{_ROUNDS.value + 1} bare rounds of {_BARE_STEPS.value}; CPU: every thread's"
    )
    print(f"bare jitted train step, waiting for each: {rounds['waiting'].line()}")
    print(f"bare jitted train step, {MAX_STEPS_AHEAD} ahead: {rounds['ahead'].line()}")
    print(f"trainer: {in_loop.line()} in the loop")
    for name in ("ahead", "waiting"):
        wall = loop_share(np.median(in_loop.wall), np.median(rounds[name].wall))
        cpu = loop_share(np.median(in_loop.cpu), np.median(rounds[name].cpu))
        print(
            f"trainer: {np.median(in_loop.wall) * 1e3:.2f} ms per step in the loop; loop share "
            f"against bare {name}: {wall:.1%} of the wall time, {cpu:.1%} of the CPU time"
        )
    alone = rounds["no-work loop"]
    print(
        f"the loop alone, its steps doing no work: {alone.line()}, "
        f"{np.median(alone.wall) / np.median(in_loop.wall):.1%} of a trainer step's wall time, "
        f"{np.median(alone.cpu) / np.median(in_loop.cpu):.1%} of its CPU time"
    )
    if _PYTORCH.value:
        torch_eager = rounds["pytorch"]
        ratio = np.median(torch_eager.wall) / np.median(in_loop.wall)
        print(f"pytorch eager: {torch_eager.line()}; step time pytorch / trainer {ratio:.2f}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("loop_cost"))
