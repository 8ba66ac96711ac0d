"""length_profile: per-position accuracy, cross-attention alignment and ponder steps at test
lengths, checked against the trainer's own metrics and hand-built attention weights."""

import json
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from analysis_fixtures import assert_png
from tiny_configs import tiny_model

from transformer_jax.analysis import length_profile
from transformer_jax.data.batching import seq2seq_row, stack
from transformer_jax.families import family_of
from transformer_jax.models import build_model
from transformer_jax.train import losses
from transformer_jax.train.restore import load_run


@pytest.fixture(scope="module")
def run(copy_workdir):
    return load_run(str(copy_workdir))


def test_aligned_source_of_copy_and_reverse():
    np.testing.assert_array_equal(length_profile.aligned_source("copy", 3), [0, 1, 2, -1])
    np.testing.assert_array_equal(length_profile.aligned_source("reverse", 3), [2, 1, 0, -1])
    assert length_profile.aligned_source("addition", 3) is None


def test_examples_have_exactly_the_asked_length(run):
    examples = length_profile.examples_of_length(run.config.data, 7, 5, seed=0)
    assert [len(x) for x, _ in examples] == [7] * 5
    np.testing.assert_array_equal(examples[0][0], examples[0][1])  # copy


def test_alignment_counts_a_head_whose_argmax_is_the_source_position():
    source_T = np.array([0, 1, 2, -1])
    w_BNTS = np.full((1, 2, 4, 3), 0.1)
    w_BNTS[0, 1, 0, 0] = w_BNTS[0, 1, 1, 1] = 0.9  # head 1 aligns the first two positions
    w_BNTS[0, 0, 2, 0] = 0.9  # head 0 points position 2 at the wrong source symbol
    weights = {"decoder/layer_0/cross_attention": w_BNTS, "encoder/layer_0/self_attention": 1}
    hits = length_profile._cross_attention_hits(weights, source_T)
    np.testing.assert_array_equal(hits, [[True, True, False, False]])
    # A recurrent stack's (U, B, N, T, S): any step counts.
    w_UBNTS = np.stack([np.full((1, 2, 4, 3), 0.1), w_BNTS])
    hits = length_profile._cross_attention_hits({"decoder/cross_attention": w_UBNTS}, source_T)
    np.testing.assert_array_equal(hits, [[True, True, False, False]])


def test_profile_accuracy_equals_the_trainer_metric(run):
    profile = length_profile.profile_length(run, 9, num_examples=20, seed=3)
    assert profile.accuracy_T.shape == (10,) and profile.alignment_T.shape == (9,)
    assert ((profile.accuracy_T >= 0) & (profile.accuracy_T <= 1)).all()
    examples = length_profile.examples_of_length(run.config.data, 9, 20, seed=3)
    tokens = run.model_config.tokens
    batch = stack(
        [seq2seq_row(x, y, 9, 10, pad_id=tokens.pad, eos_id=tokens.eos) for x, y in examples]
    )
    args, kwargs = family_of(run.model_config).inputs(batch, tokens)
    logits = run.model.apply(run.variables, *args, train=False, **kwargs)
    weights = losses.weights_from_targets(batch["targets"], tokens.pad)
    correct, count = losses.token_accuracy(logits, jnp.asarray(batch["targets"]), weights)
    np.testing.assert_allclose(profile.token_accuracy, correct / count, rtol=1e-6)
    np.testing.assert_allclose(profile.accuracy_T.mean(), correct / count, rtol=1e-6)
    exact, num = losses.sequence_accuracy(
        logits, jnp.asarray(batch["targets"]), jnp.asarray(batch["example_weights"]), weights
    )
    np.testing.assert_allclose(profile.seq_accuracy, exact / num, rtol=1e-6)


def test_universal_act_profile_reports_ponder_per_position():
    config = tiny_model(
        "encoder_decoder",
        {"universal.enabled": True, "universal.act": True, "positional.max_len": 16},
    )
    model = build_model(config)
    batch = family_of(config).example_batch(config)
    args = family_of(config).inputs(batch, config.tokens)[0]
    params = model.init(jax.random.PRNGKey(0), *args)["params"]
    data = ml_collections.ConfigDict({"name": "reverse", "variant": "t2t", "max_len": 4})
    fake_run = types.SimpleNamespace(
        config=ml_collections.ConfigDict({"data": data}),
        model_config=config,
        model=model,
        variables={"params": params},
    )
    profile = length_profile.profile_length(fake_run, 6, num_examples=3, seed=0)
    assert set(profile.ponder_T) == {"encoder", "decoder"}
    assert profile.ponder_T["encoder"].shape == (6,)
    assert profile.ponder_T["decoder"].shape == (7,)
    max_steps = config.universal.num_steps(
        max(config.num_encoder_layers, config.num_decoder_layers)
    )
    for ponder_T in profile.ponder_T.values():
        assert ((ponder_T >= 1) & (ponder_T <= max_steps)).all()
    row = length_profile.summary_row(profile, train_length=4)
    assert row["token_accuracy_new"] == pytest.approx(profile.accuracy_T[4:6].mean())


def test_lengths_past_the_model_are_rejected(run):
    with pytest.raises(ValueError, match="model.positional.max_len"):
        length_profile.profile_length(run, 500, num_examples=2, seed=0)


def test_command_line(tmp_path, copy_workdir):
    out = tmp_path / "profile.png"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_jax.analysis.length_profile",
            f"--workdir={copy_workdir}",
            "--lengths=4,10",
            "--examples=8",
            f"--out={out}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "| length | token_accuracy |" in result.stdout
    assert_png(out)
    figures = json.loads(out.with_suffix(".json").read_text())
    assert [row["length"] for row in figures["lengths"]] == [4, 10]
    assert len(figures["per_position"]["10"]["accuracy"]) == 11
