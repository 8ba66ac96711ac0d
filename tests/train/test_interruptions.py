"""Interrupted runs: whatever stops a run (a kill, a signal, a full disk), resuming it ends with
exactly the metrics.jsonl of an uninterrupted run, and a failure says where and why at once."""

import errno
import json
import os
import signal
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hooked_iterator import hook_next_run
from orbax.checkpoint._src.handlers import json_checkpoint_handler
from train_fixtures import read_metrics, tiny_config

from transformer_jax.train.loop import MAX_STEPS_AHEAD
from transformer_jax.train.numerics import NonFiniteError
from transformer_jax.train.restore import load_run
from transformer_jax.train.seed_group import train_seed_group
from transformer_jax.train.trainer import train_and_evaluate


def _config(data_dir, steps=20, **train):
    """Windows of 5 steps, a checkpoint every 10, 20 steps: room for a kill before the first
    checkpoint and for signals in the middle of a window, before and after it. One eval split
    and no decoding, so that the many runs here compile little."""
    cadence = {"log_every": 5, "eval_every": 10, "checkpoint_every": 10, "generate_eval": False}
    config = tiny_config(data_dir, steps_=steps, **{**cadence, **train})
    config.data.num_test_long = 0
    return config


class _Killed(BaseException):
    """Stands for kill -9: nothing after it runs in the trainer but its `finally`."""


def _interrupted(monkeypatch, at: int, how: str) -> None:
    """The next run's training iterator interrupts the process when it fetches its `at`-th
    batch: "signal" sends SIGTERM (that step still trains), "kill" raises _Killed (it does
    not)."""

    def interrupt(fetched, batch):
        if fetched == at:
            if how == "kill":
                raise _Killed
            os.kill(os.getpid(), signal.SIGTERM)
        return batch

    hook_next_run(monkeypatch, interrupt)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tfds")


def test_every_interruption_resumes_to_the_metrics_of_an_uninterrupted_run(
    tmp_path, data_dir, monkeypatch
):
    """A kill before the first checkpoint, a signal mid-window, a kill mid-window: the resumed
    run logs exactly the uninterrupted run's lines, and its tokens/s is the median over every
    process's windows that did not compile (like wall time, summed over the processes)."""
    config = _config(data_dir)
    # Windows that shared the machine with the evaluations' compiling thread are no rate either
    # (train/compile_ahead.py); which those are depends on the machine's speed.
    config.train.compile_ahead = False
    reference = train_and_evaluate(config, str(tmp_path / "reference"))
    workdir = tmp_path / "run"
    # Each process is interrupted at its n-th batch:
    _interrupted(monkeypatch, 7, "kill")  # after the line of step 5, before the first checkpoint
    with pytest.raises(_Killed):
        train_and_evaluate(config, str(workdir))
    _interrupted(monkeypatch, 13, "signal")  # from 0: past the checkpoint of 10, saves step 13
    assert train_and_evaluate(config, str(workdir)).step == 13
    _interrupted(monkeypatch, 4, "kill")  # from 13: after the line of step 15, before step 17
    with pytest.raises(_Killed):
        train_and_evaluate(config, str(workdir))
    finished = train_and_evaluate(config, str(workdir))  # from 13 again
    assert finished.metrics == reference.metrics
    assert read_metrics(workdir) == read_metrics(tmp_path / "reference")
    lines = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    rates = {m["step"]: m["tokens_per_sec"] for m in lines if m["split"] == "train"}
    # Windows 5 and 15 were the first of their processes (compiling); 10 and 20 count.
    assert finished.tokens_per_sec == pytest.approx(np.median([rates[10], rates[20]]))


def test_a_run_diverging_in_its_first_window_logs_it(tmp_path, data_dir):
    config = _config(
        data_dir, learning_rate=1e30, grad_clip_norm=0.0, schedule="constant", warmup_steps=0
    )
    with pytest.raises(NonFiniteError, match="step 5"):
        train_and_evaluate(config, str(tmp_path / "run"))
    lines = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [(m["step"], m["split"]) for m in lines] == [(5, "train")]
    assert not np.isfinite(lines[0]["loss"])


def test_a_full_disk_fails_the_run_at_the_failed_save_in_one_line(
    tmp_path, data_dir, monkeypatch, caplog
):
    """The save of step 10 runs out of space in orbax's background thread: the run stops at
    the next logging step, not the end, with one error naming the checkpoint and the cause, a
    "failed" summary, no tracebacks on stderr, and step 5, the last good checkpoint, intact."""
    config = _config(data_dir, steps=30, checkpoint_every=5)
    workdir = tmp_path / "run"
    write_json = json_checkpoint_handler.JsonCheckpointHandler._save_fn

    async def disk_full(self, item, directory):
        if f"{os.sep}10.orbax-checkpoint-tmp" in str(directory):
            path = str(directory / self._filename)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return await write_json(self, item, directory)

    monkeypatch.setattr(json_checkpoint_handler.JsonCheckpointHandler, "_save_fn", disk_full)
    with pytest.raises(OSError, match="checkpoints/10 could not be saved .*No space left"):
        train_and_evaluate(config, str(workdir))
    assert not [record.getMessage() for record in caplog.records if record.exc_info]
    lines = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert max(m["step"] for m in lines) <= 15
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["status"] == "failed" and "No space left on device" in summary["error"]
    monkeypatch.undo()
    assert load_run(str(workdir)).state.step == 5


def _slow_steps(monkeypatch, signal_at: int) -> dict:
    """Each train step carries ~0.1 s of extra device work, far more than the loop's host work
    per step, so an unbounded loop would dispatch far ahead of the device. SIGTERM arrives as
    the loop dispatches step `signal_at`; the returned dict then holds "finished", how many
    steps the device had finished at that moment."""
    from transformer_jax.train import parallel, seed_group
    from transformer_jax.train import step as steps

    make_train_step = steps.make_train_step
    seen = {}

    def slow_train_step(*args, **kwargs):
        train_step = make_train_step(*args, **kwargs)

        def step(state, batch, **step_kwargs):
            state, metrics = train_step(state, batch, **step_kwargs)
            x = jnp.full((192, 192), 1e-3) * metrics["loss"]
            x = jax.lax.fori_loop(0, 100, lambda i, x: jnp.tanh(x @ x), x)
            return state, {**metrics, "loss": metrics["loss"] + 0.0 * x[0, 0]}

        return step

    def signalling(compiled):
        dispatched = []  # each step's device metrics

        def step(state, batch):
            if len(dispatched) + 1 == signal_at:
                ready = [jax.tree.leaves(m)[0].is_ready() for m in dispatched]
                seen["finished"] = ready.index(False) if False in ready else len(ready)
                signal.raise_signal(signal.SIGTERM)  # handled before the next statement
            state, metrics = compiled(state, batch)
            dispatched.append(metrics)
            return state, metrics

        return step

    compile_train = parallel.Parallel.compile_train
    compile_group_train = seed_group.compile_group_train
    monkeypatch.setattr(steps, "make_train_step", slow_train_step)
    monkeypatch.setattr(
        parallel.Parallel,
        "compile_train",
        lambda self, *args: signalling(compile_train(self, *args)),
    )
    monkeypatch.setattr(
        seed_group, "compile_group_train", lambda *args: signalling(compile_group_train(*args))
    )
    return seen


@pytest.mark.parametrize(
    "seeds",
    # The group's loop bounds its steps in flight as the solo run's does (minutes under load).
    [None, pytest.param((0, 3), marks=pytest.mark.slow)],
    ids=["solo", "seed_group"],
)
def test_a_signal_is_honoured_within_the_steps_in_flight(tmp_path, data_dir, monkeypatch, seeds):
    """Slow device steps and one logging step at the end (log_every 1000): an unbounded loop
    would queue every step before its first wait, and the stop's save would wait for all of
    them. The loop stays MAX_STEPS_AHEAD steps ahead of the device, so the stop's checkpoint is
    at most MAX_STEPS_AHEAD + 1 steps after the last step the device had finished when the
    signal came, whatever the machine's speed."""
    config = _config(data_dir, steps=40, log_every=1000, eval_every=1000, checkpoint_every=1000)
    seen = _slow_steps(monkeypatch, signal_at=12)
    if seeds is None:
        summaries = [train_and_evaluate(config, str(tmp_path / "run"))]
        workdirs = [tmp_path / "run"]
    else:
        summaries = train_seed_group(config, str(tmp_path / "group"), seeds)
        workdirs = [tmp_path / "group" / f"seed_{seed}" for seed in seeds]
    for summary, workdir in zip(summaries, workdirs, strict=True):
        assert summary.status == "stopped" and summary.step == 12
        assert [p.name for p in (workdir / "checkpoints").iterdir()] == ["12"]
    assert 12 - seen["finished"] <= MAX_STEPS_AHEAD + 1
