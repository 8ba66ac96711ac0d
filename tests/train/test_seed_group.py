"""Seed groups: each seed of a group trains, logs and checkpoints as it would alone."""

import json

import jax
import numpy as np
import pytest
from train_fixtures import read_metrics, tiny_config

from transformer_jax import run_dir
from transformer_jax.train.restore import load_run
from transformer_jax.train.seed_group import train_seed_group
from transformer_jax.train.trainer import train_and_evaluate

SEEDS = (0, 3)


def _solo(config, seed, workdir):
    config = config.copy_and_resolve_references()
    config.seed = seed
    return train_and_evaluate(config, str(workdir))


def _params(workdir):
    return jax.tree.leaves(jax.device_get(load_run(str(workdir)).state.params))


def _max_difference(group_dir, solo_dir):
    pairs = zip(_params(group_dir), _params(solo_dir), strict=True)
    return max(float(np.max(np.abs(a - b))) for a, b in pairs)


def test_each_seed_of_a_group_equals_its_solo_run(tmp_path):
    """Seq2seq with dropout: per-seed metrics.jsonl, summary and final parameters bit for bit."""
    config = tiny_config(tmp_path / "tfds", steps_=20, eval_every=20, checkpoint_every=10)
    summaries = train_seed_group(config, str(tmp_path / "group"), SEEDS)
    assert [s.status for s in summaries] == ["finished", "finished"]
    for seed, summary in zip(SEEDS, summaries, strict=True):
        group_dir = tmp_path / "group" / f"seed_{seed}"
        solo = _solo(config, seed, tmp_path / f"solo_{seed}")
        assert read_metrics(group_dir) == read_metrics(tmp_path / f"solo_{seed}")
        assert summary.metrics == solo.metrics and summary.num_params == solo.num_params
        assert _max_difference(group_dir, tmp_path / f"solo_{seed}") == 0.0
        on_disk = run_dir.read_summary(group_dir)
        assert on_disk.status == "finished" and on_disk.metrics == solo.metrics
        assert json.loads((group_dir / "config.json").read_text())["seed"] == seed
    # The seeds differ from each other: different initial parameters and data.
    assert summaries[0].metrics != summaries[1].metrics
