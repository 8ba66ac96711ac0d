"""The training loop end to end on a tiny copy task: learning, resuming, stopping, diverging."""

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from train_fixtures import dotted, read_metrics, tiny_config

from transformer_jax import run_dir
from transformer_jax.config import DATASET_TOKENS as DATA
from transformer_jax.data import registry
from transformer_jax.families import shift_right
from transformer_jax.train.checkpoint import Checkpointer
from transformer_jax.train.logger import MetricsLogger
from transformer_jax.train.numerics import NonFiniteError
from transformer_jax.train.restore import load_run
from transformer_jax.train.trainer import train_and_evaluate

REPO = Path(__file__).resolve().parents[2]
# Every step logged, evaluated and saved. The warmup stays the shared config's: the train step
# is then the one the other runs here compiled (tiny_configs.tiny_copy_config).
EVERY_STEP = {"log_every": 2, "eval_every": 2, "checkpoint_every": 2}


def test_shift_right_is_teacher_forcing():
    targets = jnp.array([[5, 6, 7, 2, 0, 0]])
    np.testing.assert_array_equal(shift_right(targets, tokens=DATA), [[1, 5, 6, 7, 0, 0]])
    packed = jnp.array([[5, 6, 2, 8, 2, 0]])
    segments = jnp.array([[1, 1, 1, 2, 2, 0]])
    np.testing.assert_array_equal(shift_right(packed, segments, tokens=DATA), [[1, 5, 6, 1, 8, 0]])


def test_trains_logs_and_summarises(tmp_path):
    workdir = tmp_path / "run"
    summary = train_and_evaluate(tiny_config(tmp_path / "tfds"), str(workdir))
    assert summary.status == "finished" and summary.step == 60
    assert set(summary.metrics) == {"test", "test_long"}
    on_disk = json.loads((workdir / "summary.json").read_text())
    assert on_disk["metrics"]["test"]["loss"] == pytest.approx(summary.metrics["test"]["loss"])
    assert on_disk["num_params"] == summary.num_params > 0 and on_disk["error"] is None
    # Where the time went (train/timing.py): every phase ran, and they add up to the total.
    timing = on_disk["timing"]
    for phase in ("data", "init", "compile", "train", "eval", "decode", "checkpoint"):
        assert timing[phase] > 0, phase
    parts = sum(v for k, v in timing.items() if k != "total")
    assert parts == pytest.approx(timing["total"], abs=0.01)
    # The checkpointer saves on its own cadence (every 20 steps), keeping the newest 2.
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["40", "60"]
    lines = read_metrics(workdir)
    train = [m for m in lines if m["split"] == "train"]
    assert [m["step"] for m in train] == [10, 20, 30, 40, 50, 60]
    assert train[-1]["loss"] < train[0]["loss"]
    for key in ("grad_norm", "param_norm", "update_norm", "learning_rate", "token_accuracy"):
        assert np.isfinite(train[-1][key])
    evals = [m for m in lines if m["split"] == "test"]
    assert [m["step"] for m in evals] == [30, 60]
    assert any(k.startswith("attention_entropy/") for k in evals[0])
    # Greedy decoding agrees with teacher-forced exact match (see tests/test_decoding.py).
    assert evals[-1]["gen_seq_accuracy"] == pytest.approx(evals[-1]["seq_accuracy"])
    config = json.loads((workdir / "config.json").read_text())
    assert config["model"]["vocab_size"] == 13 and "git_commit" in config
    assert list(workdir.glob("events.out.tfevents.*"))


@pytest.mark.slow  # three runs, two of them processes; test_interruptions.py kills in process
def test_resume_after_kill_equals_uninterrupted_run(tmp_path):
    """kill -9 mid-run, rerun the same command: the same metrics, bit for bit, on CPU."""
    data_dir = tmp_path / "tfds"
    reference = tmp_path / "reference"
    # No decoding: each of the three runs compiles only the train and eval steps.
    train_and_evaluate(tiny_config(data_dir, steps_=40, generate_eval=False), str(reference))

    workdir = tmp_path / "killed"
    command = [
        sys.executable,
        "-m",
        "transformer_jax.main",
        "--config=configs/algorithmic.py:copy",
        f"--workdir={workdir}",
        f"--config.data.data_dir={data_dir}",
    ]
    overrides = tiny_config(data_dir, steps_=40, generate_eval=False)
    for section in ("model", "data", "train"):
        for key, value in dotted(overrides[section].to_dict()):
            command.append(f"--config.{section}.{key}={value}")
    paths = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "train")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    # The first process SIGKILLs itself as it fetches its 25th batch once checkpoint 20 is on
    # disk (multihost_cases.fault_hook): mid-run at any machine speed, which a kill timed from
    # outside is not (a fast run could finish before it lands).
    fault = {"kind": "kill", "at": 25, "after": 20}
    killer = (
        "from pathlib import Path; from hooked_iterator import run_main; "
        "from multihost_cases import fault_hook; "
        f"run_main(fault_hook({fault!r}, Path({str(workdir)!r})))"
    )
    killer_command = [sys.executable, "-c", killer, *command[3:]]
    killed = subprocess.run(killer_command, cwd=REPO, env=env, capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (workdir / "summary.json").exists()

    resumed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Resumed" in resumed.stdout
    expected = json.loads((reference / "summary.json").read_text())["metrics"]
    actual = json.loads((workdir / "summary.json").read_text())["metrics"]
    assert actual == expected
    assert read_metrics(workdir) == read_metrics(reference)


def test_sigterm_saves_a_checkpoint_and_resume_continues(tmp_path, monkeypatch):
    config = tiny_config(tmp_path / "tfds", steps_=40, generate_eval=False)
    workdir = tmp_path / "run"
    # Deliver SIGTERM once training is under way: at the first logged window (step 10).
    original = MetricsLogger.write

    def write(self, step, split, metrics):
        original(self, step, split, metrics)
        if step == 10 and split == "train":
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(MetricsLogger, "write", write)
    summary = train_and_evaluate(config, str(workdir))
    monkeypatch.undo()
    assert summary.status == "stopped"
    stopped_at = summary.step
    assert stopped_at % config.train.checkpoint_every  # not a step the cadence would save
    assert (workdir / "checkpoints" / str(stopped_at)).exists()
    assert not (workdir / "summary.json").exists()
    finished = train_and_evaluate(config, str(workdir))
    assert finished.status == "finished"
    # Wall time sums over both processes: at least the time of the last metrics line, which
    # continues the first process's clock.
    last_line = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[-1])
    assert finished.wall_time_s >= last_line["time"] > 0


def test_a_run_stopped_by_a_signal_exits_with_its_own_code(tmp_path):
    """Not 0: a script chaining on success must not carry on with an unfinished run."""
    script = (
        "import transformer_jax.main as m; from absl import app; "
        "from transformer_jax.run_dir import RunSummary; "
        "m.train_and_evaluate = lambda config, workdir, **_: RunSummary('stopped', 3); "
        "app.run(m.main)"
    )
    command = [sys.executable, "-c", script, "--config=configs/algorithmic.py:copy"]
    command.append(f"--workdir={tmp_path}")
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == run_dir.STOPPED_EXIT_CODE == 75, result.stderr[-2000:]


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    config = tiny_config(
        tmp_path / "tfds",
        steps_=60,
        learning_rate=1e30,
        grad_clip_norm=0.0,
        schedule="constant",
        warmup_steps=0,
    )
    config.train.checkpoint_every = 10
    config.train.log_every = 10
    workdir = tmp_path / "run"
    with pytest.raises(NonFiniteError, match="step"):
        train_and_evaluate(config, str(workdir))
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["status"] == "diverged" and "loss" in summary["error"]
    saved = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert all(step < summary["step"] for step in saved)


def test_no_recompilation_after_the_first_step(tmp_path, caplog):
    config = tiny_config(tmp_path / "tfds", steps_=40)
    config.train.eval_every = 10
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level(logging.WARNING):
            train_and_evaluate(config, str(tmp_path / "run"))
    finally:
        jax.config.update("jax_log_compiles", False)
    compiles = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert sum("train_step" in m for m in compiles) == 1, compiles
    # One eval compile per distinct eval batch shape (test and test_long pad differently).
    assert sum("eval_step" in m for m in compiles) <= 2, compiles


def _compiles(config, workdir, caplog) -> list:
    """(thread name, message) of every compilation while `config` trains in `workdir`."""
    caplog.clear()
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level(logging.WARNING):
            train_and_evaluate(config, str(workdir))
    finally:
        jax.config.update("jax_log_compiles", False)
    return [(r.threadName, r.getMessage()) for r in caplog.records if "Compiling" in r.getMessage()]


def test_evaluations_compile_ahead_on_their_thread_with_the_same_results(tmp_path, caplog):
    """train/compile_ahead.py: the eval step and greedy decoding compile on the compile_ahead
    thread, once per batch shape, and the evaluations that follow compile nothing; without it
    they compile in the loop. Every logged metric is the same either way."""
    runs = {}
    for ahead in (True, False):
        config = tiny_config(tmp_path / "tfds", steps_=20)
        config.train.eval_every = 10
        config.train.compile_ahead = ahead
        runs[ahead] = tmp_path / f"ahead_{ahead}"
        compiles = _compiles(config, runs[ahead], caplog)
        evals = [(thread, m) for thread, m in compiles if "eval_step" in m or "generation" in m]
        assert {thread for thread, _ in evals} == {"compile_ahead" if ahead else "MainThread"}
        # test and test_long batches have their own shapes; each program compiles once each.
        assert sum("eval_step" in m for _, m in evals) == 2, evals
        assert sum("generation" in m for _, m in evals) == 2, evals
    clocks = ("time", "tokens_per_sec")
    logged = {
        ahead: [
            {k: v for k, v in json.loads(line).items() if k not in clocks}
            for line in (path / "metrics.jsonl").read_text().splitlines()
        ]
        for ahead, path in runs.items()
    }
    assert logged[True] == logged[False] and len(logged[True]) >= 4


def test_a_finished_run_is_left_as_it_is_unless_asked_to_evaluate_it(tmp_path, monkeypatch):
    """Rerunning a finished run's command returns its summary without evaluating or writing;
    evaluate_finished evaluates its final state again (the same metrics). (A longer
    train.steps is a resume change: test_a_resume_refuses_optimizer_changes_...)."""
    from transformer_jax.train import run_host

    config = tiny_config(tmp_path / "tfds", steps_=10, eval_every=10)
    workdir = tmp_path / "run"
    first = train_and_evaluate(config, str(workdir))
    files = {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()}
    calls = []
    real = run_host.evaluate
    monkeypatch.setattr(
        run_host, "evaluate", lambda *a, **k: calls.append(1) or real(*a, **k), raising=True
    )
    again = train_and_evaluate(config, str(workdir))
    assert again == first and not calls
    assert {p.name: p.read_bytes() for p in workdir.iterdir() if p.is_file()} == files
    evaluated = train_and_evaluate(config, str(workdir), evaluate_finished=True)
    assert calls and evaluated.metrics == first.metrics


def test_bad_inputs_fail_before_compiling(tmp_path):
    config = tiny_config(tmp_path / "tfds")
    config.model.positional.kind = "fourier"
    with pytest.raises(ValueError, match="model.positional.kind='fourier'"):
        train_and_evaluate(config, str(tmp_path / "a"))
    config = tiny_config(tmp_path / "tfds")
    config.model.positional.max_len = 4
    with pytest.raises(ValueError, match="model.positional.max_len=4"):
        train_and_evaluate(config, str(tmp_path / "b"))
    config = tiny_config(tmp_path / "tfds")
    config.train.checkpoint_every = 15
    with pytest.raises(ValueError, match="train.checkpoint_every=15"):
        train_and_evaluate(config, str(tmp_path / "c"))
    config = tiny_config(tmp_path / "tfds")
    config.model.family = "decoder_only"
    with pytest.raises(ValueError, match="model.family='decoder_only'"):
        train_and_evaluate(config, str(tmp_path / "d"))
    config = tiny_config(tmp_path / "tfds")
    config.train.evaluators.generation.splits = ("dev",)
    with pytest.raises(ValueError, match="generation.splits contains 'dev'.*'test_long'"):
        train_and_evaluate(config, str(tmp_path / "e"))
    assert not (tmp_path / "a").exists()


def test_decoding_only_the_splits_asked_for(tmp_path):
    config = tiny_config(tmp_path / "tfds", steps_=10, eval_every=10)
    config.train.evaluators.generation.splits = ("test",)
    summary = train_and_evaluate(config, str(tmp_path / "run"))
    assert "gen_seq_accuracy" in summary.metrics["test"]
    assert "gen_seq_accuracy" not in summary.metrics["test_long"]
    assert "seq_accuracy" in summary.metrics["test_long"]


def test_refuses_to_resume_a_different_config(tmp_path):
    config = tiny_config(tmp_path / "tfds", steps_=2, generate_eval=False, **EVERY_STEP)
    train_and_evaluate(config, str(tmp_path / "run"))
    config.model.norm.kind = "rmsnorm"
    with pytest.raises(ValueError, match="different config.model .*norm.kind"):
        train_and_evaluate(config, str(tmp_path / "run"))


def test_a_run_and_its_readers_load_the_dataset_once_each_and_keep_tmp_dirs(tmp_path, monkeypatch):
    entry = registry.DATASETS["copy"]
    loads = []

    def counting_build(data_config):
        loads.append(data_config.name)
        return entry.build(data_config)

    counting = dataclasses.replace(entry, build=counting_build)
    monkeypatch.setitem(registry.DATASETS._entries, "copy", counting)
    config = tiny_config(tmp_path / "tfds", steps_=2, **EVERY_STEP)
    assert train_and_evaluate(config, str(tmp_path / "run")).status == "finished"
    assert loads == ["copy"]
    # A reader leaves the run directory alone, a running trainer's save in progress included.
    in_progress = tmp_path / "run" / "checkpoints" / "4.orbax-checkpoint-tmp-99"
    in_progress.mkdir()
    assert load_run(str(tmp_path / "run")).info.eval_splits == ("test", "test_long")
    assert loads == ["copy", "copy"]
    assert in_progress.exists()


def test_a_config_that_fails_validation_leaves_the_workdir_untouched(tmp_path):
    """Validation runs before anything is written, so fixing the value and rerunning works."""
    config = tiny_config(tmp_path / "tfds", steps_=2, **EVERY_STEP)
    config.data.batch_size = 0
    with pytest.raises(ValueError, match="data.batch_size=0"):
        train_and_evaluate(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    config.data.batch_size = 16
    assert train_and_evaluate(config, str(tmp_path / "run")).status == "finished"


def test_a_resume_refuses_optimizer_changes_and_records_the_others(tmp_path):
    """A changed optimizer field is refused before the workdir changes; a changed learning rate
    or step count is recorded with the step it took effect, keeping the first steps' config."""
    every_step = {**EVERY_STEP, "generate_eval": False}  # three runs, each compiling no decoding
    config = tiny_config(tmp_path / "tfds", steps_=2, **every_step)
    workdir = tmp_path / "run"
    train_and_evaluate(config, str(workdir))
    before = (workdir / "config.json").read_text()
    for field, value in (("optimizer", "sgd"), ("b2", 0.9), ("grad_clip_norm", 0.0)):
        changed = tiny_config(tmp_path / "tfds", steps_=2, **{**every_step, field: value})
        with pytest.raises(ValueError, match=f"train.{field}: .* -> {value!r}"):
            train_and_evaluate(changed, str(workdir))
        assert (workdir / "config.json").read_text() == before
    assert load_run(str(workdir)).state.step == 2

    config.train.update(steps=4, learning_rate=5e-4)
    assert train_and_evaluate(config, str(workdir)).step == 4
    config.train.steps = 6
    assert train_and_evaluate(config, str(workdir)).step == 6
    recorded = json.loads((workdir / "config.json").read_text())
    assert recorded["train"]["steps"] == 2 and recorded["train"]["learning_rate"] == 1e-3
    assert [(r["step"], r["changes"]) for r in recorded["resumes"]] == [
        (
            2,
            {
                "train.steps": {"from": 2, "to": 4},
                "train.learning_rate": {"from": 1e-3, "to": 5e-4},
            },
        ),
        (4, {"train.steps": {"from": 4, "to": 6}}),
    ]
    assert load_run(str(workdir)).config.train.learning_rate == 5e-4


def test_two_trainers_never_write_one_run_directory(tmp_path):
    """Another process (here: another lock holder) training the workdir makes a second refuse
    before writing; the lock goes with its holder, so the run then trains."""
    config = tiny_config(tmp_path / "tfds", steps_=2, **EVERY_STEP)
    workdir = tmp_path / "run"
    workdir.mkdir()
    holder = run_dir.lock_run(workdir)
    with pytest.raises(ValueError, match=f"being trained by another process \\(pid {os.getpid()}"):
        train_and_evaluate(config, str(workdir))
    assert not (workdir / "config.json").exists()
    holder.close()
    assert train_and_evaluate(config, str(workdir)).status == "finished"


def test_window_rates_time_the_steps_not_their_dispatch(tmp_path, monkeypatch):
    """Dispatch is asynchronous: a window's tokens/s must wait for its steps. The clock the
    loop reads here counts 1 s per dispatched step that the device has finished, and nothing
    else, so a rate that waits for its 4 steps is the window's tokens / 4 s at any machine
    speed; one read while steps are still in flight would be higher. Each step carries ~0.1 s
    of extra device work, far more than its dispatch, so steps are in flight when the window
    ends. A char LM has a fixed number of target tokens per step (batch x context: 4 x 16)."""
    from types import SimpleNamespace

    from transformer_jax import defaults
    from transformer_jax.train import parallel, run_host
    from transformer_jax.train import step as steps

    dispatched = []  # each step's device metrics

    def finished_steps() -> float:
        return float(sum(jax.tree.leaves(m)[0].is_ready() for m in dispatched))

    def recording(compiled):
        def step(state, batch):
            state, metrics = compiled(state, batch)
            dispatched.append(metrics)
            return state, metrics

        return step

    make_train_step = steps.make_train_step

    def slow_train_step(*args, **kwargs):
        train_step = make_train_step(*args, **kwargs)

        def step(state, batch):
            state, metrics = train_step(state, batch)
            x = jnp.full((192, 192), 1e-3) * metrics["loss"]
            x = jax.lax.fori_loop(0, 100, lambda i, x: jnp.tanh(x @ x), x)
            return state, {**metrics, "loss": metrics["loss"] + 0.0 * x[0, 0]}

        return step

    compile_train = parallel.Parallel.compile_train
    monkeypatch.setattr(steps, "make_train_step", slow_train_step)
    monkeypatch.setattr(
        parallel.Parallel, "compile_train", lambda self, *a: recording(compile_train(self, *a))
    )
    monkeypatch.setattr(run_host, "time", SimpleNamespace(perf_counter=finished_steps))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    config = defaults.base_config("text_file")
    config.data.update(path=str(corpus), data_dir=str(tmp_path / "tfds"), seq_len=16, batch_size=4)
    config.model.update(family="decoder_only", d_model=16, num_decoder_layers=1)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 32
    config.train.update(steps=24, log_every=4, eval_every=24, checkpoint_every=24, warmup_steps=2)
    train_and_evaluate(config, str(tmp_path / "run"))
    monkeypatch.undo()
    train = [m for m in read_metrics_with_times(tmp_path / "run") if m["split"] == "train"]
    assert [m["step"] for m in train] == [4, 8, 12, 16, 20, 24] and len(dispatched) == 24
    for line in train:
        assert line["tokens_per_sec"] == pytest.approx(4 * 64 / 4.0), line["step"]


def read_metrics_with_times(workdir):
    return [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


def test_a_damaged_or_missing_config_json_is_refused_never_resumed_unchecked(tmp_path):
    """config.json cut short, empty, not an object or deleted beside checkpoints: the resume
    (here with another seed, which it must refuse) and `generate`'s loader name the file instead
    of resuming unchecked or saying the directory holds no run; nothing is written."""
    config = tiny_config(tmp_path / "tfds", steps_=2, generate_eval=False, **EVERY_STEP)
    workdir = tmp_path / "run"
    train_and_evaluate(config, str(workdir))
    path = workdir / "config.json"
    whole = path.read_text()
    config.seed, config.train.steps = 7, 4
    for damaged in (whole[: len(whole) // 2], "", "[1, 2]", None):
        if damaged is None:
            path.unlink()
        else:
            path.write_text(damaged)
        for attempt in (
            lambda: train_and_evaluate(config, str(workdir)),
            lambda: load_run(str(workdir)),
        ):
            with pytest.raises(ValueError, match=f"{path} is (damaged|missing)"):
                attempt()
        assert load_run_files(workdir) == (damaged, 2)
    path.write_text(whole)
    assert load_run(str(workdir)).state.step == 2


def load_run_files(workdir: Path) -> tuple[str | None, int]:
    """config.json's text (None when absent) and the latest checkpoint's step."""
    path = workdir / "config.json"
    steps = [int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()]
    return (path.read_text() if path.exists() else None), max(steps)


def test_a_checkpoint_without_checksums_is_said_unverified_and_bad_weights_refused(
    tmp_path, capsys
):
    """checksums.json deleted: the reader says the bytes are unverified; with bytes flipped
    too, weights that are no longer finite are refused instead of decoded from."""
    config = tiny_config(tmp_path / "tfds", steps_=2, generate_eval=False, **EVERY_STEP)
    workdir = tmp_path / "run"
    train_and_evaluate(config, str(workdir))
    checkpoint = workdir / "checkpoints" / "2"
    (checkpoint / "checksums.json").unlink()
    capsys.readouterr()
    assert int(load_run(str(workdir)).state.step) == 2
    assert capsys.readouterr().err == (
        f"note: checkpoint {checkpoint} has no checksums.json: its bytes are unverified\n"
    )
    # A parameter set to infinity, as flipped exponent bits make it, saved without checksums.
    with Checkpointer(workdir, every=1, keep=10) as checkpointer:
        state, data = checkpointer.restore(load_run(str(workdir)).state)
        params = jax.tree.map(lambda x: x.at[..., 0].set(jnp.inf), state.params)
        checkpointer.save(3, state.replace(params=params, step=3), data)
    (workdir / "checkpoints" / "3" / "checksums.json").unlink()
    with pytest.raises(ValueError, match=r"checkpoint .*/3 holds non-finite weights \(params\["):
        load_run(str(workdir))
