"""Confusion matrix: counts against a hand-made case, and a tiny ViT trained by the real loop."""

import json

import numpy as np
import pytest
from analysis_fixtures import assert_png

from transformer_jax import defaults
from transformer_jax.analysis.confusion import confusion_matrix, plot, predict, report
from transformer_jax.train.restore import load_run
from transformer_jax.train.trainer import train_and_evaluate


def test_confusion_matrix_counts_true_rows_against_predicted_columns():
    labels = np.array([0, 0, 1, 2, 2, 2])
    predicted = np.array([0, 1, 1, 2, 0, 2])
    expected = np.array([[1, 1, 0], [0, 1, 0], [1, 0, 2]])
    matrix = confusion_matrix(labels, predicted, 3)
    np.testing.assert_array_equal(matrix, expected)
    text = report(matrix)
    assert text.startswith("accuracy 0.6667 on 6 examples")
    assert "1 x true 2 predicted 0" in text


@pytest.fixture(scope="module")
def vit_workdir(tmp_path_factory):
    """A ViT trained on digits for a few steps by the real training loop."""
    root = tmp_path_factory.mktemp("vit")
    config = defaults.base_config("digits")
    config.data.update(data_dir=str(root / "tfds"), batch_size=32)
    config.model.update(family="vit", d_model=16, num_encoder_layers=1, dropout_rate=0.0)
    config.model.vit.patch_size = 4
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 32
    config.model.norm.position = "pre"
    config.train.update(
        steps=30,
        learning_rate=3e-3,
        warmup_steps=5,
        log_every=10,
        eval_every=30,
        checkpoint_every=30,
        diagnostics=False,
    )
    train_and_evaluate(config, str(root / "run"))
    return root / "run"


def test_vit_trains_and_its_confusion_matrix_matches_the_logged_accuracy(vit_workdir, tmp_path):
    summary = json.loads((vit_workdir / "summary.json").read_text())
    test = summary["metrics"]["test"]
    assert summary["status"] == "finished" and set(test) == {"loss", "accuracy", "mean_loss"}
    assert test["loss"] < np.log(10)  # better than the uniform start of the zero-init head
    run = load_run(str(vit_workdir))
    labels, predicted = predict(run, "test")
    matrix = confusion_matrix(labels, predicted, 10)
    assert matrix.sum() == 300
    assert np.trace(matrix) / 300 == pytest.approx(test["accuracy"])
    assert_png(plot(matrix, tmp_path / "confusion.png", "digits"))


def test_confusion_rejects_unknown_splits(vit_workdir):
    with pytest.raises(ValueError, match=r"--split='validation'.*\['train', 'test'\]"):
        predict(load_run(str(vit_workdir)), "validation")
