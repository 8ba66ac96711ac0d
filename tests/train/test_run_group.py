"""Run groups: members that differ in seed and optimizer scalars, trained as one program, each
as it would train alone (the tolerance of test_seed_group.py's docstring)."""

import json
import os
import subprocess
import sys

import pytest
from test_seed_group import (
    REPO,
    _Killed,
    _solo,
    assert_same_run,
    copy_config,
    stopped_at_step_5,
)
from train_fixtures import dotted, read_metrics

from transformer_jax import run_dir
from transformer_jax.config import TrainConfig
from transformer_jax.train import group_memory, seed_group
from transformer_jax.train.checkpoint import Checkpointer
from transformer_jax.train.seed_group import check_members, train_run_group
from transformer_jax.train.trainer import prepare

STEPS = 15
# 2 rates x 2 seeds; the rates also differ in warmup (0: none, the traced branch-free case).
SETTINGS = {
    "lr_a": {"learning_rate": 0.5, "warmup_steps": 0},
    "lr_b": {"learning_rate": 0.25, "warmup_steps": 4},
}
SEEDS = (0, 3)


def _members(data_dir):
    """The group's configs and run directories (relative: setting/seed_<s>)."""
    configs, names = [], []
    for name, fields in SETTINGS.items():
        for seed in SEEDS:
            config = copy_config(data_dir, steps=STEPS)
            config.train.update(**fields)
            config.seed = seed
            configs.append(config)
            names.append(f"{name}/seed_{seed}")
    return configs, names


def _train(configs, names, workdir, **kwargs):
    return train_run_group(configs, [workdir / name for name in names], **kwargs)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 2 x 2 group: (configs, names, its directory, its summaries)."""
    root = tmp_path_factory.mktemp("run_group")
    configs, names = _members(root / "tfds")
    summaries = _train(configs, names, root / "group")
    return configs, names, root / "group", summaries


def test_each_member_of_a_run_group_matches_its_solo_run(reference, tmp_path):
    configs, names, group, summaries = reference
    assert [(s.status, s.step) for s in summaries] == [("finished", STEPS)] * 4
    for config, name in zip(configs, names, strict=True):
        _solo(config, config.seed, tmp_path / name)
        assert_same_run(group / name, tmp_path / name)
        resolved = run_dir.read_config(group / name)
        assert resolved["seed"] == config.seed
        assert resolved["train"]["learning_rate"] == config.train.learning_rate
    # The rates trained differently: the group did not give every member one optimizer.
    assert summaries[0].metrics != summaries[2].metrics


def test_a_run_group_killed_between_its_members_saves_resumes_each_member(
    reference, tmp_path, monkeypatch
):
    """Killed (as by kill -9) at the step-10 save of the last member, after the others saved
    it: the rerun resumes each member from its own checkpoint and ends every member exactly as
    the uninterrupted group does."""
    configs, names, reference_dir, _ = reference
    save = Checkpointer.save

    def killed_at_the_last_members_save(self, step, *args, **kwargs):
        if step == 10 and names[-1] in self.directory:
            raise _Killed
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "save", killed_at_the_last_members_save)
    with pytest.raises(_Killed):
        _train(configs, names, tmp_path)
    monkeypatch.undo()
    steps = []
    for name in names:
        with Checkpointer(tmp_path / name, every=5, keep=2) as checkpointer:
            steps.append(checkpointer.latest_step())
    assert steps == [10, 10, 10, 5]
    resumed = _train(configs, names, tmp_path)
    assert [(s.status, s.step) for s in resumed] == [("finished", STEPS)] * 4
    for name in names:
        assert read_metrics(tmp_path / name) == read_metrics(reference_dir / name)


@pytest.mark.slow
def test_a_run_group_stopped_by_a_signal_resumes_every_member(reference, tmp_path, monkeypatch):
    configs, names, reference_dir, _ = reference
    stopped = stopped_at_step_5(monkeypatch, lambda: _train(configs, names, tmp_path))
    assert [(s.status, s.step) for s in stopped] == [("stopped", 5)] * 4
    resumed = _train(configs, names, tmp_path)
    assert [(s.status, s.step) for s in resumed] == [("finished", STEPS)] * 4
    for name in names:
        assert read_metrics(tmp_path / name) == read_metrics(reference_dir / name)


@pytest.mark.slow
def test_a_group_split_by_max_group_size_trains_each_member_as_its_solo_run(reference, tmp_path):
    configs, names, reference_dir, _ = reference
    summaries = _train(configs, names, tmp_path, max_group_size=3)
    assert [(s.status, s.step) for s in summaries] == [("finished", STEPS)] * 4
    for name in names:  # Other programs (3 lanes, then 1): equal to rounding.
        assert_same_run(tmp_path / name, reference_dir / name)


def test_members_that_one_program_cannot_train_are_refused(tmp_path):
    configs, _ = _members(tmp_path / "tfds")
    assert check_members(configs) == ("learning_rate", "warmup_steps")
    configs[1].model.dropout_rate = 0.3
    with pytest.raises(ValueError, match=r"differ in model.dropout_rate \(\['0.1', '0.3'\]\)"):
        check_members(configs)
    configs, _ = _members(tmp_path / "tfds")
    configs[0].train.grad_clip_norm, configs[1].train.grad_clip_norm = 0.0, 1.0
    with pytest.raises(ValueError, match="whether train.grad_clip_norm > 0"):
        check_members(configs)
    for config, norm in zip(configs, (2.0, 1.0, 1.0, 1.0), strict=True):
        config.train.grad_clip_norm = norm
    assert check_members(configs) == ("learning_rate", "warmup_steps", "grad_clip_norm")
    with pytest.raises(ValueError, match="one distinct run directory per config"):
        train_run_group(configs, [tmp_path / "a"] * 4)


def test_a_group_halves_until_its_step_fits_the_device():
    tried = []

    def bytes_of(size):
        tried.append(size)
        return 100 * size

    limit = 500 / group_memory.MEMORY_FRACTION
    assert group_memory.fitting_size(18, bytes_of, limit) == 5
    assert tried == [18, 9, 5]
    assert group_memory.fitting_size(18, bytes_of, None) == 18  # a CPU: no limit reported
    assert group_memory.fitting_size(3, lambda size: 10**12, 1) == 1


@pytest.mark.slow
def test_a_group_that_does_not_fit_trains_in_parts_that_do(reference, tmp_path, monkeypatch):
    """The compiled step of 4 members needs more than that of 2; with a device limit between
    them the group trains as two parts of 2, each member as in the whole group (to rounding)."""
    configs, names, reference_dir, _ = reference
    prepared = prepare(configs[0])
    train_cfgs = [TrainConfig.from_dict(c.train.to_dict()) for c in configs]
    scalars = seed_group.member_scalars(train_cfgs, check_members(configs))
    two, four = (seed_group.group_step_bytes(prepared, scalars, n) for n in (2, 4))
    assert four > two
    limit = (two + four) / 2 / group_memory.MEMORY_FRACTION
    monkeypatch.setattr(group_memory, "device_memory_limit", lambda: limit)
    parts = []
    train_runs = seed_group.train_runs

    def counted(prepared, seeds, *args, **kwargs):
        parts.append(len(seeds))
        return train_runs(prepared, seeds, *args, **kwargs)

    monkeypatch.setattr(seed_group, "train_runs", counted)
    summaries = _train(configs, names, tmp_path)
    assert parts == [2, 2]
    assert [(s.status, s.step) for s in summaries] == [("finished", STEPS)] * 4
    for name in names:
        assert_same_run(tmp_path / name, reference_dir / name)


@pytest.mark.slow
def test_the_command_line_trains_a_run_group_from_its_runs_json(reference, tmp_path):
    """`main --runs`: the config's flags shared, each run's seed and scalars in the JSON; each
    run ends as the same group trained in process does, bit for bit (the same program)."""
    configs, names, reference_dir, _ = reference
    command = [
        sys.executable,
        "-m",
        "transformer_jax.main",
        "--config=configs/algorithmic.py:copy",
        f"--workdir={tmp_path}",
    ]
    for section in ("model", "data", "train"):
        for key, value in dotted(configs[0][section].to_dict()):
            if f"{section}.{key}" not in ("train.learning_rate", "train.warmup_steps"):
                command.append(f"--config.{section}.{key}={value}")
    runs = {
        name: {"seed": c.seed, **{f"train.{k}": c.train[k] for k in SETTINGS["lr_a"]}}
        for name, c in zip(names, configs, strict=True)
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    bad = subprocess.run(
        [*command, '--runs={"../x": {"seed": 0}}'],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "main: error: --runs: '../x' must be a directory" in bad.stderr
    done = subprocess.run(
        [*command, f"--runs={json.dumps(runs)}"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name in names:
        assert read_metrics(tmp_path / name) == read_metrics(reference_dir / name)
