"""The run lock is taken before anything in the run directory is read: a trainer that another
one overtakes between its checks and its lock must see what the other wrote, never resume a
checkpoint whose config it did not check."""

import pytest
from train_fixtures import tiny_config

from transformer_jax import run_dir
from transformer_jax.train.seed_group import train_seed_group
from transformer_jax.train.trainer import train_and_evaluate

CADENCE = {"log_every": 2, "eval_every": 2, "checkpoint_every": 2}


def _overtaken_at_lock(monkeypatch, workdir, config) -> None:
    """The next lock of `workdir` is taken only after a run of `config` there has finished:
    another trainer that won the race for the directory."""
    lock_run = run_dir.lock_run

    def lock_after_another_run(path):
        if str(path) == str(workdir):
            monkeypatch.setattr(run_dir, "lock_run", lock_run)
            train_and_evaluate(config, str(workdir))
        return lock_run(path)

    monkeypatch.setattr(run_dir, "lock_run", lock_after_another_run)


def test_a_solo_run_overtaken_before_its_lock_refuses_the_others_config(tmp_path, monkeypatch):
    other = tiny_config(tmp_path / "tfds", steps_=2, **CADENCE)
    ours = other.copy_and_resolve_references()
    ours.model.attention.scale = "none"
    _overtaken_at_lock(monkeypatch, tmp_path / "run", other)
    with pytest.raises(ValueError, match="different config.model .*attention.scale"):
        train_and_evaluate(ours, str(tmp_path / "run"))
    assert run_dir.read_summary(tmp_path / "run").step == 2  # the other run's, untouched


def test_a_seed_group_overtaken_before_a_seeds_lock_refuses_and_leaves_no_directory(
    tmp_path, monkeypatch
):
    other = tiny_config(tmp_path / "tfds", steps_=2, **CADENCE)
    other.seed = 3
    ours = other.copy_and_resolve_references()
    ours.model.attention.scale = "none"
    group = tmp_path / "group"
    _overtaken_at_lock(monkeypatch, group / "seed_3", other)
    with pytest.raises(ValueError, match="different config.model .*attention.scale"):
        train_seed_group(ours, str(group), (0, 3))
    assert sorted(p.name for p in group.iterdir()) == ["seed_3"]  # seed_0 was never trained
    assert run_dir.read_summary(group / "seed_3").step == 2
