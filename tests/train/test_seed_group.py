"""Seed groups: each seed of a group trains, logs and checkpoints as it would alone.

Tolerance. `jax.vmap` turns each matmul of the step into a batched one, which XLA:CPU computes
with another blocking, so a seed's loss can differ from its solo run's in the last bit from the
first step on (measured on the tiny copy model: loss 2.4e-7 apart at step 1). With SGD at a
constant rate these differences stay at rounding level: over 20 steps every logged metric was
within 1.6e-7 relative and every parameter within 1.8e-7 absolute of the solo run's. The group's
evaluation is vmapped too (train/group_eval.py), which moves the attention-entropy diagnostic
of the seq2seq model 1.2e-6 relative from the solo run's evaluation of the same parameters. The
tests train with SGD and allow RTOL on metrics (about twenty float32 ulps) and ATOL on
parameters (about ten); a wrong data order, dropout key or initialisation moves them by 1e-3 or
more. (Adam's first updates are
about lr * sign(gradient), so a gradient entry near zero that flips sign by rounding moves a
parameter by 2 * lr: with Adam the seeds agree with their solo runs as runs on two machines do,
not to rounding.)
"""

import csv
import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from train_fixtures import dotted, read_metrics, tiny_config

from transformer_jax import defaults, run_dir
from transformer_jax.config import TrainConfig
from transformer_jax.report.report import write_report
from transformer_jax.sweep import Sweep, run_sweep
from transformer_jax.train import seed_group
from transformer_jax.train.checkpoint import Checkpointer
from transformer_jax.train.logger import MetricsLogger
from transformer_jax.train.restore import load_run
from transformer_jax.train.seed_group import (
    check_group_parallelism,
    check_seeds,
    train_seed_group,
)
from transformer_jax.train.trainer import train_and_evaluate

RTOL = 2.5e-6  # metrics: see the module docstring
ATOL = 1e-6  # parameters
SEEDS = (0, 3)
REPO = Path(__file__).resolve().parents[2]
CORPUS = "the cat sat on the mat.\n\nthe dog ate the hat.\n" * 20


def _sgd(config, steps=10):
    config.train.update(
        steps=steps,
        log_every=5,
        eval_every=steps,
        checkpoint_every=5,
        optimizer="sgd",
        schedule="constant",
        learning_rate=0.5,
        warmup_steps=0,
        grad_clip_norm=0.0,
        generate_eval=False,
        eval_examples=16,
    )
    return config


def copy_config(data_dir, steps=10, **model):
    config = _sgd(tiny_config(data_dir), steps)
    for path, value in model.items():
        section, name = path.rsplit(".", 1) if "." in path else ("", path)
        (config.model[section] if section else config.model)[name] = value
    return config


def char_lm_config(data_dir):
    corpus = data_dir / "corpus.txt"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    corpus.write_text(CORPUS)
    config = defaults.base_config("text_file")
    config.data.update(path=str(corpus), data_dir=str(data_dir), seq_len=16, batch_size=4)
    config.model.update(family="decoder_only", d_model=16, num_decoder_layers=1, dropout_rate=0.1)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 32
    return _sgd(config)


def _solo(config, seed, workdir):
    config = config.copy_and_resolve_references()
    config.seed = seed
    return train_and_evaluate(config, str(workdir))


def _params(workdir):
    return jax.tree.leaves(jax.device_get(load_run(str(workdir)).state.params))


def assert_same_run(group_dir, solo_dir, rtol=RTOL):
    """metrics.jsonl line for line (rtol) and the final parameters (ATOL)."""
    group, solo = read_metrics(group_dir), read_metrics(solo_dir)
    assert [(m["step"], m["split"], sorted(m)) for m in group] == [
        (m["step"], m["split"], sorted(m)) for m in solo
    ]
    for ours, theirs in zip(group, solo, strict=True):
        names = [k for k in theirs if k not in ("step", "split")]
        np.testing.assert_allclose(
            [ours[k] for k in names], [theirs[k] for k in names], rtol=rtol, err_msg=str(names)
        )
    for ours, theirs in zip(_params(group_dir), _params(solo_dir), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)


def assert_same_metrics(group, reference):
    """Every seed's metrics.jsonl equal, bit for bit, to the reference group's."""
    for seed in SEEDS:
        name = f"seed_{seed}"
        assert read_metrics(group / name) == read_metrics(reference / name)


def test_each_seed_of_a_group_matches_its_solo_run(tmp_path, capsys, monkeypatch):
    """Seq2seq with dropout; the second seed of the group against its solo run, and every seed
    directory a complete run of its own; rerun, the finished group is left as it is."""
    config = copy_config(tmp_path / "tfds")
    summaries = train_seed_group(config, str(tmp_path / "group"), SEEDS)
    assert [s.status for s in summaries] == ["finished", "finished"]
    # The seeds share one console (a sweep's run.log): each line of a step names its seed.
    lines = [line for line in capsys.readouterr().out.splitlines() if "step 10" in line]
    assert {line.split(" | ")[0] for line in lines} == {f"seed_{seed}" for seed in SEEDS}, lines
    solo = _solo(config, SEEDS[1], tmp_path / "solo")
    group_dir = tmp_path / "group" / f"seed_{SEEDS[1]}"
    assert_same_run(group_dir, tmp_path / "solo")
    assert summaries[1].num_params == solo.num_params and summaries[1].step == 10
    for split, values in solo.metrics.items():
        assert summaries[1].metrics[split] == pytest.approx(values, rel=RTOL)
    assert summaries[0].metrics != summaries[1].metrics  # other parameters, dropout and data
    for seed, summary in zip(SEEDS, summaries, strict=True):
        seed_dir = tmp_path / "group" / f"seed_{seed}"
        assert run_dir.read_summary(seed_dir) == summary
        assert json.loads((seed_dir / "config.json").read_text())["seed"] == seed
        assert sorted(p.name for p in (seed_dir / "checkpoints").iterdir()) == ["10", "5"]
        assert list(seed_dir.glob("events.out.tfevents.*"))
        assert (seed_dir / run_dir.TOKENIZER_FILE).exists()
    # Neither trains into the other's directory, where a reader would take one for the other.
    group, files = tmp_path / "group", sorted(p.name for p in (tmp_path / "group").iterdir())
    with pytest.raises(
        ValueError, match=f"--workdir={group} holds a seed group .seed_{SEEDS[0]}, seed_{SEEDS[1]}"
    ):
        train_and_evaluate(config, str(group))
    with pytest.raises(ValueError, match=f"--workdir={group} holds a seed group: name one"):
        load_run(str(group))
    with pytest.raises(ValueError, match=f"--workdir={tmp_path / 'solo'} holds a run of its own"):
        train_seed_group(config, str(tmp_path / "solo"), SEEDS)
    assert sorted(p.name for p in group.iterdir()) == files
    assert not (tmp_path / "solo" / "seed_0").exists()
    # Rerun, the finished group builds no program and writes nothing: each seed's summary back.
    before = {p: p.read_bytes() for p in group.rglob("*") if p.is_file()}
    monkeypatch.setattr(seed_group.GroupProgram, "__init__", _refuse_to_build)
    assert train_seed_group(config, str(group), SEEDS) == summaries
    assert {p: p.read_bytes() for p in group.rglob("*") if p.is_file()} == before


def _refuse_to_build(*args, **kwargs):
    raise AssertionError("a program was built for a group that ended before")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["seq2seq", "decoder_only", "batchnorm", "universal_act"])
def test_every_seed_matches_its_solo_run(tmp_path, case):
    data_dir = tmp_path / "data"
    config = {
        "seq2seq": lambda: copy_config(data_dir),
        "decoder_only": lambda: char_lm_config(data_dir),
        "batchnorm": lambda: copy_config(data_dir, **{"norm.kind": "batchnorm"}),
        "universal_act": lambda: copy_config(
            data_dir,
            **{
                "universal.enabled": True,
                "universal.steps": 3,
                "universal.act": True,
                "universal.act_threshold_eps": 0.5,
                "universal.act_halting_bias_init": 0.0,
            },
        ),
    }[case]()
    train_seed_group(config, str(tmp_path / "group"), SEEDS)
    for seed in SEEDS:
        _solo(config, seed, tmp_path / f"solo_{seed}")
        assert_same_run(tmp_path / "group" / f"seed_{seed}", tmp_path / f"solo_{seed}")


@pytest.mark.slow
def test_a_group_stopped_by_a_signal_resumes_every_seed(tmp_path, monkeypatch):
    """SIGTERM at step 5: every seed checkpoints; the rerun resumes them and ends as an
    uninterrupted group does, bit for bit (the same program)."""
    config = copy_config(tmp_path / "tfds")
    train_seed_group(config, str(tmp_path / "reference"), SEEDS)
    stopped = stopped_at_step_5(
        monkeypatch, lambda: train_seed_group(config, str(tmp_path / "group"), SEEDS)
    )
    assert [(s.status, s.step) for s in stopped] == [("stopped", 5), ("stopped", 5)]
    resumed = train_seed_group(config, str(tmp_path / "group"), SEEDS)
    assert [(s.status, s.step) for s in resumed] == [("finished", 10), ("finished", 10)]
    assert_same_metrics(tmp_path / "group", tmp_path / "reference")


def stopped_at_step_5(monkeypatch, train):
    """`train()` with a SIGTERM once step 5 is logged (the trainer saves and stops there)."""
    original = MetricsLogger.write

    def write(self, step, split, metrics):
        original(self, step, split, metrics)
        if step == 5:
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(MetricsLogger, "write", write)
    try:
        return train()
    finally:
        monkeypatch.setattr(MetricsLogger, "write", original)


class _Killed(BaseException):
    """Stands for kill -9: nothing after it runs in the trainer but its cleanup."""


def test_a_group_killed_between_its_seeds_saves_resumes_each_seed_from_its_own(
    tmp_path, monkeypatch
):
    """Killed after seed 0 saved step 10 and before seed 3 did: the rerun resumes seed 0 at 10
    and seed 3 at 5, trains them together (each lane reads its own step) and ends each seed
    exactly as an uninterrupted group does."""
    config = copy_config(tmp_path / "tfds", steps=15)
    train_seed_group(config, str(tmp_path / "reference"), SEEDS)
    save = Checkpointer.save

    def killed_at_seed_3s_save(self, step, *args, **kwargs):
        if step == 10 and f"seed_{SEEDS[1]}" in self.directory:
            raise _Killed
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "save", killed_at_seed_3s_save)
    with pytest.raises(_Killed):
        train_seed_group(config, str(tmp_path / "group"), SEEDS)
    monkeypatch.undo()
    steps = {}
    for seed in SEEDS:
        with Checkpointer(tmp_path / "group" / f"seed_{seed}", every=5, keep=2) as checkpointer:
            steps[seed] = checkpointer.latest_step()
    assert steps == {SEEDS[0]: 10, SEEDS[1]: 5}
    resumed = train_seed_group(config, str(tmp_path / "group"), SEEDS)
    assert [(s.status, s.step) for s in resumed] == [("finished", 15), ("finished", 15)]
    assert_same_metrics(tmp_path / "group", tmp_path / "reference")


def test_each_seed_of_a_group_stops_early_as_its_solo_run_does(tmp_path):
    """Early stopping per seed: each seed ends "finished" at its own stop, with the summary
    and checkpoint its solo run has."""
    config = copy_config(tmp_path / "tfds", steps=20)
    config.train.update(
        eval_every=5,
        early_stop_metric="test/token_accuracy",
        early_stop_patience=1,
        early_stop_min_delta=2.0,  # No accuracy beats the first: the second evaluation stops.
    )
    summaries = train_seed_group(config, str(tmp_path / "group"), SEEDS)
    solo = _solo(config, SEEDS[1], tmp_path / "solo")
    assert (solo.status, solo.step, solo.early_stop["stopped_step"]) == ("finished", 10, 10)
    for seed, summary in zip(SEEDS, summaries, strict=True):
        assert (summary.status, summary.step, summary.early_stop["best_step"]) == (
            "finished",
            10,
            5,
        )
        assert run_dir.read_summary(tmp_path / "group" / f"seed_{seed}") == summary
    assert summaries[1].metrics["test"] == pytest.approx(solo.metrics["test"], rel=RTOL)
    assert_same_run(tmp_path / "group" / f"seed_{SEEDS[1]}", tmp_path / "solo")


@pytest.mark.parametrize(
    "seeds,message",
    [
        ((), "--seeds is empty"),
        ((1, -2), "--seeds=1,-2 holds -2; valid seeds"),
        ((1, 1), "repeats a seed"),
    ],
)
def test_bad_seeds_are_refused(seeds, message):
    with pytest.raises(ValueError, match=message):
        check_seeds(seeds)


@pytest.mark.parametrize(
    "field,value", [("parallelism", "pmap"), ("fsdp", 2), ("distributed", True)]
)
def test_layouts_that_do_not_replicate_the_state_are_refused(field, value):
    with pytest.raises(ValueError, match=rf"train.{field}={value!r} cannot train a seed group"):
        check_group_parallelism(TrainConfig(**{field: value}))


def test_batches_padded_to_their_own_lengths_are_refused_before_training(tmp_path):
    """Length buckets give each seed's batch of a step its own width: the group says so in one
    line instead of failing to stack them."""
    config = tiny_config(tmp_path / "tfds")
    config.data.bucket_by_length = "each"
    with pytest.raises(ValueError, match=r"data.bucket_by_length.*--seed_groups=false"):
        train_seed_group(config, str(tmp_path / "group"), SEEDS)
    assert not (tmp_path / "group" / f"seed_{SEEDS[0]}" / "checkpoints").exists()


@pytest.mark.slow
def test_a_seed_of_a_group_resumes_on_its_own(tmp_path):
    """A seed directory is an ordinary run: trained on alone it resumes from the group's last
    checkpoint and ends as a solo run of all the steps does."""
    config = copy_config(tmp_path / "tfds")
    config.train.eval_every = 5
    train_seed_group(config, str(tmp_path / "group"), SEEDS)
    longer = config.copy_and_resolve_references()
    longer.train.steps = 15
    resumed = _solo(longer, SEEDS[1], tmp_path / "group" / f"seed_{SEEDS[1]}")
    assert (resumed.status, resumed.step) == ("finished", 15)
    _solo(longer, SEEDS[1], tmp_path / "solo")
    assert_same_run(tmp_path / "group" / f"seed_{SEEDS[1]}", tmp_path / "solo")


@pytest.mark.slow
def test_the_command_line_trains_a_group_into_seed_directories(tmp_path):
    config = copy_config(tmp_path / "tfds")
    command = [
        sys.executable,
        "-m",
        "transformer_jax.main",
        "--config=configs/algorithmic.py:copy",
        f"--workdir={tmp_path / 'group'}",
    ]
    for section in ("model", "data", "train"):
        for key, value in dotted(config[section].to_dict()):
            command.append(f"--config.{section}.{key}={value}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = functools.partial(subprocess.run, cwd=REPO, env=env, capture_output=True, text=True)
    bad = run([*command, "--seeds=0,x"])
    assert bad.returncode == 2 and "main: error: --seeds=0,x is invalid" in bad.stderr
    done = run([*command, "--seeds=0,3"])
    assert done.returncode == 0, done.stderr[-2000:]
    for seed in SEEDS:
        summary = run_dir.read_summary(tmp_path / "group" / f"seed_{seed}")
        assert (summary.status, summary.step) == ("finished", 10)
    # On two devices the two seeds train on one device each (the seed axis sharded), and each
    # seed's run, evaluations and checkpoints equal the one-device group's (evaluation splits
    # each batch over the two devices, which sums in another order: 1e-5).
    command[4] = f"--workdir={tmp_path / 'group_on_2'}"
    # Added to the suite's flags (tests/conftest.py), as the first group compiled with them.
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    done = run([*command, "--seeds=0,3"])
    assert done.returncode == 0, done.stderr[-2000:]
    for seed in SEEDS:
        assert_same_run(
            tmp_path / "group_on_2" / f"seed_{seed}", tmp_path / "group" / f"seed_{seed}", 1e-5
        )


@pytest.mark.slow
def test_diverged_seeds_get_their_own_diverged_summary(tmp_path):
    config = copy_config(tmp_path / "tfds")
    config.train.learning_rate = 1e9
    summaries = train_seed_group(config, str(tmp_path / "group"), SEEDS)
    for seed, summary in zip(SEEDS, summaries, strict=True):
        assert summary.status == "diverged" and "loss" in summary.error
        assert run_dir.read_summary(tmp_path / "group" / f"seed_{seed}") == summary
        # Logged, like a solo run's diverged window, then no longer trained on.
        lines = read_metrics(tmp_path / "group" / f"seed_{seed}")
        assert [m["step"] for m in lines] == [summary.step]


@pytest.mark.slow
def test_a_sweep_trains_each_variant_as_one_seed_group(tmp_path, monkeypatch):
    """The sweep runner with the real trainer: one process per variant, every seed finished in
    its own run directory, the report over both seeds."""
    config = copy_config(tmp_path / "tfds")
    overrides = {
        f"{section}.{key}": value
        for section in ("model", "data", "train")
        for key, value in dotted(config[section].to_dict())
        if value is not None
    }
    sweep = Sweep(
        config="configs/algorithmic.py",
        config_arg="copy",
        variants={"base": overrides, "no_scale": {**overrides, "model.attention.scale": "none"}},
        seeds=SEEDS,
        metrics=("test/loss",),
        baseline="base",
    )
    monkeypatch.chdir(REPO)
    # The repository may hold uncommitted work while its tests run: not what this test checks.
    counts = run_sweep(
        sweep, "inline", str(tmp_path / "sweep"), machine={"platform": "cpu"}, allow_dirty=True
    )
    assert counts == {"finished": 4}
    write_report(str(tmp_path / "sweep"))
    for variant in ("base", "no_scale"):
        for seed in SEEDS:
            run = tmp_path / "sweep" / variant / f"seed_{seed}"
            assert (
                f"# trained in the seed group {variant}/seed_{{0,3}}"
                in (run / "command.txt").read_text()
            )
            assert run_dir.read_summary(run).step == 10
    with open(tmp_path / "sweep" / "results.csv") as f:
        assert [row["variant"] for row in csv.DictReader(f)] == ["base", "no_scale"]
