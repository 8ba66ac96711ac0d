"""Evaluators (train/evaluators.py): the config's blocks say which run; a new one plugs in by
registration, with no change to the loop or the run-directory contract."""

import json

from train_fixtures import read_metrics, tiny_config

from transformer_jax.train import evaluators
from transformer_jax.train.trainer import train_and_evaluate


def test_the_default_blocks_are_every_registered_evaluator():
    from transformer_jax.config import TrainConfig

    assert list(TrainConfig().evaluators) == evaluators.EVALUATORS.names()


class _CountsExamples:
    """A new evaluation: the number of examples of each split, as a metric."""

    name = "examples"
    at_end = False

    def __init__(self, eval_sets):
        self._eval_sets = eval_sets

    def evaluate(self, state, results, *, final):
        for split, batches in self._eval_sets.items():
            count = sum(float(batch["example_weights"].sum()) for batch in batches)
            results.setdefault(split, {})["examples"] = count

    def summary_fields(self):
        return {"splits": sorted(self._eval_sets)}


def test_a_registered_evaluator_runs_where_the_config_lists_it(tmp_path, monkeypatch):
    """Only the evaluators with blocks run: here no decoding (no gen_seq_accuracy), and a new
    evaluation's metrics logged at every evaluation beside the teacher-forced ones; what it
    records for the summary lands in summary.json's extras under its name."""
    registry = evaluators.EVALUATORS
    entry = evaluators.EvaluatorEntry(lambda context: _CountsExamples(context.prepared.eval_sets))
    monkeypatch.setitem(registry._entries, "examples", entry)
    config = tiny_config(tmp_path / "tfds", steps_=4, log_every=2, eval_every=2, checkpoint_every=2)
    config.train.evaluators = {"teacher_forced": {}, "examples": {}}
    summary = train_and_evaluate(config, str(tmp_path / "run"))
    assert summary.metrics["test"]["examples"] == config.data.num_test
    assert "gen_seq_accuracy" not in summary.metrics["test"]
    evals = [m for m in read_metrics(tmp_path / "run") if m["split"] == "test"]
    assert [m["step"] for m in evals] == [2, 4]
    assert all(m["examples"] == 64 and "loss" in m for m in evals)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["extras"] == {"examples": {"splits": ["test", "test_long"]}}
