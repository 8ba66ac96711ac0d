"""The character-LM sweeps (experiments/charlm_*.py) run `quick` on a small text of the test's
own, its sha256 given, and their runs log every metric the sweeps report and select on."""

import hashlib
from pathlib import Path

import pytest
from ml_collections.config_flags import config_path

from transformer_jax import defaults
from transformer_jax.sweep import load_sweep
from transformer_jax.train.trainer import train_and_evaluate

REPO = Path(__file__).resolve().parents[2]
TEXT = "".join(
    f"ROMEO {i}:\nBut soft, what light through yonder window breaks?\n\n" for i in range(60)
)


@pytest.mark.parametrize(
    ("name", "variant"),
    [
        # One sweep in the fast tier, the others in the slow one (each a training run).
        ("charlm_normalization.py", "post_layernorm"),
        pytest.param("charlm_attention_scale.py", "dk64_learned", marks=pytest.mark.slow),
        pytest.param("charlm_positional.py", "alibi", marks=pytest.mark.slow),
    ],
)
def test_a_variant_runs_quick_and_logs_what_the_sweep_reads(name, variant, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    sweep = load_sweep(f"experiments/{name}")
    assert sweep.equivalence_margins and set(sweep.nuisance) == {
        "train.learning_rate",
        "train.warmup_steps",
    }
    text_path = tmp_path / "input.txt"
    text_path.write_text(TEXT, encoding="utf-8")
    config = defaults.from_file(sweep.config, "quick")
    for key, value in sweep.variants[variant].items():
        config_path.set_value(key, config, value)
    config.data.update(
        path=str(text_path),
        sha256=hashlib.sha256(TEXT.encode("utf-8")).hexdigest(),
        data_dir=str(tmp_path / "tfds"),
    )
    # Two evaluations; a threshold every loss is below, so steps_to_threshold is logged.
    config.train.update(steps=20, warmup_steps=5, log_every=10, eval_every=10, checkpoint_every=20)
    config.train.loss_threshold = 100.0
    summary = train_and_evaluate(config, str(tmp_path / "run"))
    for metric in sweep.recorded_metrics:
        split, _, key = metric.partition("/")
        assert key in summary.metrics[split], metric
    assert summary.metrics["test"]["steps_to_threshold"] == 10.0
