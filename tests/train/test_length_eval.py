"""Train short, test long (train/length_eval.py): loss by position on windows longer than the
training ones, for the encodings that have entries there, and a refusal for those that do not."""

import dataclasses
import json
import types

import jax
import numpy as np
import pytest
from train_fixtures import read_metrics

from transformer_jax import defaults
from transformer_jax.config import TrainConfig
from transformer_jax.models import build_model
from transformer_jax.train import evaluators, length_eval
from transformer_jax.train.trainer import prepare, train_and_evaluate

TRAIN_LEN, FACTOR = 16, 4
# Enough text for the test split (5%) to hold a few windows of 64 characters.
CORPUS = "".join(
    np.random.default_rng(0).choice(list("abcdefgh .\n"), size=24_000, replace=True).tolist()
)


def lm_config(tmp, **block):
    corpus = tmp / "corpus.txt"
    corpus.write_text(CORPUS)
    config = defaults.base_config("text_file")
    config.data.update(
        path=str(corpus),
        data_dir=str(tmp / "data"),
        seq_len=TRAIN_LEN,
        batch_size=4,
        validation_fraction=0.05,
        test_fraction=0.05,
    )
    config.model.update(family="decoder_only", d_model=16, num_decoder_layers=1, dropout_rate=0.0)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 32
    config.model.positional.update(kind="rotary", max_len=32)
    config.train.update(steps=2, log_every=1, eval_every=2, eval_examples=8, warmup_steps=0)
    config.train.evaluators = {
        "teacher_forced": {},
        "length_extrapolation": {"enabled": True, "factor": FACTOR, "bucket": 8, **block},
    }
    return config


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepare(lm_config(tmp_path_factory.mktemp("lm")))


def _with_kind(prepared, kind):
    model_config = prepared.model_config.override({"positional.kind": kind})
    return dataclasses.replace(prepared, model_config=model_config, model=build_model(model_config))


def _per_position(step, variables, batches):
    """Per-position loss sums (T,) and weights (T,) over `batches`."""
    state = types.SimpleNamespace(variables=variables)
    sums = [jax.device_get(step(state, batch))["loss"] for batch in batches]
    return sum(s[0] for s in sums), sum(s[1] for s in sums)


@pytest.mark.parametrize("kind", ["sinusoidal", "rotary", "alibi", "none"])
def test_positions_below_the_training_length_read_alike_at_any_window_length(prepared, kind):
    """A causal model's loss at positions < L does not depend on what follows: the first L
    positions of the long windows score as the windows of length L that start there (the
    long windows start at every FACTOR-th short one). The long windows need no retraining:
    sinusoidal's table is computed past max_len=32, rotary, ALiBi and none need none."""
    run = _with_kind(prepared, kind)
    length = FACTOR * TRAIN_LEN
    assert length > run.model_config.positional.max_len
    model = length_eval.eval_model(run, length, FACTOR)
    ids = np.zeros((1, TRAIN_LEN), np.int32)
    variables = run.model.init(jax.random.key(1), ids, train=False)
    long = run.dataset.windows("test", length=length, batch_size=4, max_examples=4)
    short = run.dataset.windows("test", length=TRAIN_LEN, batch_size=16, max_examples=16)
    short = [{key: value[::FACTOR] for key, value in batch.items()} for batch in short]
    long_loss, long_weight = _per_position(length_eval.position_step(model), variables, long)
    short_loss, short_weight = _per_position(length_eval.position_step(run.model), variables, short)
    assert long_loss.shape == (length,) and long_weight[-1] == 4
    np.testing.assert_array_equal(long_weight[:TRAIN_LEN], short_weight)
    # Two XLA programs (lengths 16 and 64): equal to float32 rounding.
    np.testing.assert_allclose(long_loss[:TRAIN_LEN], short_loss, rtol=1e-5)
    assert np.isfinite(long_loss).all() and (long_loss > 0).all()


def test_learned_positions_are_refused_past_their_table_only(prepared):
    run = _with_kind(prepared, "learned")
    with pytest.raises(ValueError, match=r"model\.positional\.max_len=32 .*no entries past"):
        length_eval.eval_model(run, FACTOR * TRAIN_LEN, FACTOR)
    assert length_eval.eval_model(run, 2 * TRAIN_LEN, 2) is run.model  # rows 0 .. 31 exist


def test_the_metrics_are_means_over_their_positions():
    """Buckets, bands and windows against sums written out by hand; weight 0 is left out."""
    loss_T = np.arange(1.0, 9.0)  # positions 1 .. 8, loss = position
    weight_T = np.ones(8)
    weight_T[7] = 0.0
    loss_T[7] = 0.0
    found = length_eval.position_metrics(loss_T * 2, weight_T * 2, train_len=2, bucket=2)
    assert found["loss_pos_1_2"] == pytest.approx(1.5)
    assert found["loss_pos_7_8"] == pytest.approx(7.0)
    assert found["loss_band_1x"] == pytest.approx(1.5)
    assert found["loss_band_2x"] == pytest.approx(3.5)
    assert found["loss_band_4x"] == pytest.approx(6.0)  # positions 5, 6, 7
    assert found["loss_window_4x"] == pytest.approx(4.0)  # positions 1 .. 7
    assert found["loss_window_2x"] == pytest.approx(2.5)


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("factor", 3, "factor=3 must be a power of two"),
        ("windows", -1, "windows"),
        ("bucket", 0, "bucket"),
    ],
)
def test_a_bad_option_names_its_field(option, value, match):
    cfg = TrainConfig(evaluators={"length_extrapolation": {"enabled": True, option: value}})
    with pytest.raises(ValueError, match=rf"train\.evaluators\.length_extrapolation\.{match}"):
        evaluators.check_blocks(cfg)


def test_a_run_logs_loss_by_position_to_eight_times_its_length(tmp_path):
    """End to end: the block's metrics on the test split, a bucket straddling L refused before
    the run directory is written."""
    config = lm_config(tmp_path, splits=("test",))
    workdir = tmp_path / "run"
    train_and_evaluate(config, str(workdir))
    last = [m for m in read_metrics(workdir) if m["split"] == "test"][-1]
    assert {"loss_band_1x", "loss_band_2x", "loss_band_4x", "loss_window_4x"} <= set(last)
    assert sum(name.startswith("loss_pos_") for name in last) == FACTOR * TRAIN_LEN // 8
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["extras"]["length_extrapolation"] == {"train_len": 16, "bucket": 8}
    bad = lm_config(tmp_path, bucket=5)
    with pytest.raises(ValueError, match="bucket=5 must divide"):
        train_and_evaluate(bad, str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()
