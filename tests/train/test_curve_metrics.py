"""Curve metrics (train/curve_metrics.py): every split's mean loss over the evaluations so far
and the step its loss first reached train.loss_threshold, equal after a resume."""

import math
import os
import signal

import numpy as np
import pytest
from hooked_iterator import hook_next_run
from train_fixtures import read_metrics, tiny_config

from transformer_jax.train.curve_metrics import MEAN_LOSS, STEPS_TO_THRESHOLD, CurveMetrics
from transformer_jax.train.trainer import train_and_evaluate


def test_record_is_the_running_mean_and_the_first_step_at_the_threshold():
    losses = [3.0, 2.5, 2.6, 1.9, 2.0]
    curve = CurveMetrics(threshold=2.55)
    for i, loss in enumerate(losses):
        results = {"validation": {"loss": loss}, "train_only": {"accuracy": 0.5}}
        curve.record(100 * (i + 1), results)
        assert results["validation"][MEAN_LOSS] == pytest.approx(np.mean(losses[: i + 1]))
        assert "train_only" in results and MEAN_LOSS not in results["train_only"]
        # 2.5 at step 200 is the first loss <= 2.55; the later rise does not move it.
        assert results["validation"].get(STEPS_TO_THRESHOLD) == (None if i == 0 else 200.0)
    resumed = CurveMetrics.from_state(curve.state(), threshold=2.55)
    again = {"validation": {"loss": losses[-1]}}
    resumed.annotate(again)  # a repeated final evaluation adds no point
    assert again["validation"][MEAN_LOSS] == pytest.approx(np.mean(losses))
    assert again["validation"][STEPS_TO_THRESHOLD] == 200.0


def test_without_a_threshold_steps_to_threshold_is_not_logged():
    results = {"validation": {"loss": 0.0}}
    CurveMetrics().record(10, results)
    assert STEPS_TO_THRESHOLD not in results["validation"]


def _config(data_dir, **train):
    cadence = {"log_every": 5, "eval_every": 5, "checkpoint_every": 10, "generate_eval": False}
    config = tiny_config(data_dir, steps_=20, **{**cadence, **train})
    config.data.num_test_long = 0
    return config


def _signal_at(monkeypatch, at: int) -> None:
    """The next run gets SIGTERM when it fetches its `at`-th batch (it checkpoints and stops)."""

    def interrupt(fetched, batch):
        if fetched == at:
            os.kill(os.getpid(), signal.SIGTERM)
        return batch

    hook_next_run(monkeypatch, interrupt)


def test_a_run_logs_them_at_every_evaluation_and_a_resume_logs_the_same(tmp_path, monkeypatch):
    """Against the losses of a run without a threshold: the mean of the losses so far and the
    first step at or below a threshold between two of them; a run stopped by a signal between
    its checkpoints and resumed writes exactly the uninterrupted run's lines."""
    data_dir = tmp_path / "tfds"
    plain = train_and_evaluate(_config(data_dir), str(tmp_path / "plain"))
    evals = [m for m in read_metrics(tmp_path / "plain") if m["split"] == "test"]
    losses = [m["loss"] for m in evals]
    assert all(STEPS_TO_THRESHOLD not in m for m in evals)
    for i, line in enumerate(evals):
        assert line[MEAN_LOSS] == pytest.approx(math.fsum(losses[: i + 1]) / (i + 1), rel=1e-12)
    assert plain.metrics["test"][MEAN_LOSS] == evals[-1][MEAN_LOSS]

    threshold = (losses[0] + min(losses[1:])) / 2  # reached after the first evaluation
    expected = next(m["step"] for m in evals if m["loss"] <= threshold)
    config = _config(data_dir, loss_threshold=threshold)
    reference = train_and_evaluate(config, str(tmp_path / "reference"))
    assert reference.metrics["test"][STEPS_TO_THRESHOLD] == expected > evals[0]["step"]
    _signal_at(monkeypatch, 13)  # past the checkpoint of step 10 and the evaluation at 10
    assert train_and_evaluate(config, str(tmp_path / "resumed")).step == 13
    resumed = train_and_evaluate(config, str(tmp_path / "resumed"))
    assert resumed.metrics == reference.metrics
    assert read_metrics(tmp_path / "resumed") == read_metrics(tmp_path / "reference")
