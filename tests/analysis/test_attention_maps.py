"""attention_maps: the maps are the model's attention weights, one per layer, kind and head."""

import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from analysis_fixtures import assert_png
from tiny_configs import tiny_model

from transformer_jax import decoding
from transformer_jax.analysis import attention_maps as am
from transformer_jax.data.tokenizers import CharTokenizer
from transformer_jax.layers.positional import sinusoidal_table
from transformer_jax.models import build_model
from transformer_jax.train.restore import LoadedRun, load_run
from transformer_jax.train.step import TrainState


@pytest.fixture(scope="module")
def run(copy_workdir):
    return load_run(str(copy_workdir))


@pytest.fixture(scope="module")
def maps(run):
    return am.attention_maps(run, "3 1 4 1 5", target_text="3 1 4 1")


def test_one_map_per_layer_and_attention_kind_with_every_head(run, maps):
    cfg = run.model_config
    assert [m.name for m in maps] == [
        "encoder/layer_0/self_attention",
        "encoder/layer_1/self_attention",
        "decoder/layer_0/self_attention",
        "decoder/layer_0/cross_attention",
    ]
    heads = sum(m.weights_NTS.shape[0] for m in maps)
    assert heads == (cfg.num_encoder_layers + 2 * cfg.num_decoder_layers) * cfg.attention.num_heads


def test_shapes_labels_and_rows_sum_to_one(maps):
    source = ["3", "1", "4", "1", "5"]
    decoder = ["<bos>", "3", "1", "4", "1"]  # the target shifted right behind BOS
    expected = {
        "encoder": (source, source),
        "self": (decoder, decoder),
        "cross": (decoder, source),
    }
    for m in maps:
        kind = "encoder" if m.name.startswith("encoder") else m.name.split("/")[-1].split("_")[0]
        queries, keys = expected[kind]
        assert (m.query_labels, m.key_labels) == (queries, keys)
        assert m.weights_NTS.shape == (2, len(queries), len(keys))
        np.testing.assert_allclose(m.weights_NTS.sum(axis=-1), 1.0, atol=1e-5)
        assert np.all(m.weights_NTS >= 0)


def test_decoder_self_attention_is_causal(maps):
    decoder_self = next(m for m in maps if m.name == "decoder/layer_0/self_attention")
    upper = np.triu(np.ones(decoder_self.weights_NTS.shape[1:], bool), k=1)
    assert np.all(decoder_self.weights_NTS[:, upper] < 1e-6)


def test_first_encoder_map_equals_softmax_of_scaled_query_key_products(run, maps):
    """Recomputed by hand from the parameters: x = embedding * sqrt(D) + PE, then Vaswani (1)."""
    params = jax.tree.map(np.asarray, run.state.params)
    cfg = run.model_config
    ids = np.array([6, 4, 7, 4, 8])  # "3 1 4 1 5": symbol s has id 3 + s
    x_SD = params["source_embedding"]["table"]["embedding"][ids] * math.sqrt(cfg.d_model)
    x_SD = x_SD + sinusoidal_table(len(ids), cfg.d_model)
    attention = params["encoder"]["layer_0"]["self_attention"]
    q_SNH = (
        np.einsum("sd,dnh->snh", x_SD, attention["query"]["kernel"]) + attention["query"]["bias"]
    )
    k_SNH = np.einsum("sd,dnh->snh", x_SD, attention["key"]["kernel"]) + attention["key"]["bias"]
    logits_NSS = np.einsum("snh,tnh->nst", q_SNH, k_SNH) / math.sqrt(cfg.head_dim)
    expected = np.exp(logits_NSS - logits_NSS.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(maps[0].weights_NTS, expected, rtol=1e-4, atol=1e-5)


def test_bad_inputs_are_rejected(run):
    with pytest.raises(ValueError, match="--input='3 x'"):
        am.attention_maps(run, "3 x", target_text="3")
    with pytest.raises(ValueError, match="--input has 60 tokens"):
        am.attention_maps(run, "3" * 60, target_text="3")


def test_without_target_the_decoder_reads_its_greedy_output(run):
    tokens = np.asarray(decoding.generate(run.model, run.variables, np.array([[6, 4, 7]])))[0]
    output = tokens.tolist()
    max_len = run.model_config.positional.max_len
    greedy = output[: output.index(2)] if 2 in output else output[: max_len - 1]
    maps = am.attention_maps(run, "3 1 4")
    cross = next(m for m in maps if m.name == "decoder/layer_0/cross_attention")
    assert cross.query_labels == ["<bos>"] + [str(int(t) - 3) for t in greedy]
    assert cross.key_labels == ["3", "1", "4"]
    np.testing.assert_allclose(cross.weights_NTS.sum(axis=-1), 1.0, atol=1e-5)


def random_run(family: str, changes: dict | None = None) -> LoadedRun:
    """A randomly initialised run of a family the copy task does not train, with digit tokens;
    `changes`: dotted-path config changes."""
    config = tiny_model(family, {"positional.max_len": 12, **(changes or {})}, num_classes=2)
    model = build_model(config)
    params = model.init(jax.random.PRNGKey(0), np.ones((1, 4), np.int32))["params"]
    state = TrainState(jnp.int32(0), params, {}, None, jax.random.PRNGKey(1))
    return LoadedRun(None, None, config, model, state, stored_tokenizer=CharTokenizer("0123456789"))


def test_decoder_only_reads_bos_then_the_input():
    maps = am.attention_maps(random_run("decoder_only"), "7 0 7")
    assert [m.name for m in maps] == [
        "decoder/layer_0/self_attention",
        "decoder/layer_1/self_attention",
    ]
    for m in maps:
        assert m.query_labels == m.key_labels == ["<bos>", "7", "0", "7"]
        assert m.weights_NTS.shape == (2, 4, 4)
        assert np.all(np.triu(m.weights_NTS[0], k=1) < 1e-6)


def test_universal_transformer_has_one_map_per_recurrent_step():
    maps = am.attention_maps(random_run("decoder_only", {"universal.enabled": True}), "7 0 7")
    assert [m.name for m in maps] == [
        "decoder/recurrence/block/self_attention/step_1",
        "decoder/recurrence/block/self_attention/step_2",
    ]
    assert [am.short_name(m.name) for m in maps] == ["dec self s1", "dec self s2"]
    for m in maps:
        assert m.weights_NTS.shape == (2, 4, 4)
        assert np.all(np.triu(m.weights_NTS[0], k=1) < 1e-6)
    # The shared block reads a different state at each step.
    assert not np.allclose(maps[0].weights_NTS, maps[1].weights_NTS)


def test_classifier_maps_include_the_class_token():
    maps = am.attention_maps(random_run("encoder_classifier"), "1 2")
    assert [m.name for m in maps] == ["encoder/layer_0/self_attention"]
    assert maps[0].query_labels == maps[0].key_labels == ["<cls>", "1", "2"]
    np.testing.assert_allclose(maps[0].weights_NTS.sum(axis=-1), 1.0, atol=1e-5)


def test_plot(tmp_path, maps):
    assert_png(am.plot(maps, str(tmp_path / "maps.png"), title="tiny copy run"))


@pytest.mark.slow
def test_command_line(tmp_path, copy_workdir):
    out = tmp_path / "cli.png"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_jax.analysis.attention_maps",
            f"--workdir={copy_workdir}",
            "--input=3 1 4",
            "--target=3 1 4",
            f"--out={out}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "decoder/layer_0/cross_attention: 2 heads x 4 queries x 3 keys" in proc.stdout
    assert_png(out)
