"""Token conventions from the tokenizer and the config: id 0 is a real token where there is no
PAD or another one, a tokenizer with other ids trains and decodes with them, and left-padded
prompts decode as their unpadded rows."""

import inspect

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tiny_configs import tiny_model

from transformer_jax import decoding, families
from transformer_jax.analysis import amy, tokens
from transformer_jax.config import DATASET_TOKENS, TokenConfig
from transformer_jax.data import batching, pipeline
from transformer_jax.data.info import DatasetInfo, special_ids
from transformer_jax.families import family_of
from transformer_jax.models import build_model
from transformer_jax.train import losses
from transformer_jax.train import step as steps
from transformer_jax.train.trainer import check_token_ids

NO_PAD = tiny_model("decoder_only", {"tokens.pad_id": -1, "tokens.bos_id": 5, "tokens.eos_id": 5})


def test_an_id_0_token_moves_no_later_logit_of_another_row():
    model = build_model(NO_PAD)
    ids = jnp.array([[3, 4, 6, 7, 8], [3, 4, 6, 7, 8]], jnp.int32)
    variables = model.init(jax.random.PRNGKey(0), ids)
    zeroed = ids.at[1, 1].set(0)
    logits = model.apply(variables, jnp.concatenate([ids[:1], zeroed[1:]]))
    np.testing.assert_allclose(logits[0], model.apply(variables, ids)[0], atol=1e-6)
    assert np.abs(np.asarray(logits[1, 2:] - logits[0, 2:])).max() > 1e-4  # 0 is read


def test_left_padded_prompts_decode_as_their_unpadded_rows_cached_and_full():
    model = build_model(NO_PAD)
    prompt = jnp.array([[3, 4, 6]], jnp.int32)
    variables = model.init(jax.random.PRNGKey(0), prompt)
    config = decoding.DecodeConfig(max_new_tokens=3)
    alone = decoding.generate(model, variables, prompt, config)
    padded = jnp.array([[9, 5, 3, 4, 6], [5, 7, 3, 4, 6]], jnp.int32)  # 5: BOS after padding
    valid = jnp.array([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    both = decoding.generate(model, variables, padded, config, prompt_valid_BP=valid)
    np.testing.assert_array_equal(both[0, 2:], alone[0])
    step, cache = decoding.full_forward_step(model, variables, batch_size=2, length=8)
    full = decoding.left_to_right(
        step, cache, padded, max_new_tokens=3, tokens=NO_PAD.tokens, prompt_valid_BP=valid
    )
    np.testing.assert_array_equal(full, both)


class OtherIdsTokenizer:
    """Characters a..f at ids 0..4 and 6 (id 0 a real token), PAD 5, EOS 7, no BOS."""

    source = "the test's alphabet"
    pad_id, bos_id, eos_id = 5, None, 7
    _ids = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4, "f": 6}
    vocab_size = 8

    def encode(self, text):
        return [self._ids[c] for c in text]

    def decode(self, ids):
        chars = {i: c for c, i in self._ids.items()}
        return "".join(chars[int(i)] for i in ids if int(i) in chars)


OTHER = tiny_model(
    "decoder_only", {"tokens.pad_id": 5, "tokens.bos_id": -1, "tokens.eos_id": 7}, vocab_size=8
)
# Row 0: a b a c EOS PAD PAD; row 1: d a a e f a EOS. Id 0 ("a") is a real token.
TARGETS = np.array([[0, 1, 0, 2, 7, 5, 5], [3, 0, 0, 4, 6, 0, 7]], np.int32)


def test_id_0_is_a_weighted_target_where_pad_is_another_id_or_absent():
    np.testing.assert_array_equal(losses.weights_from_targets(TARGETS, 5), TARGETS != 5)
    assert np.asarray(losses.weights_from_targets(TARGETS, None)).all()
    assert not np.asarray(losses.weights_from_targets(TARGETS, 0)).all()  # the datasets' PAD 0
    batch = {"targets": jnp.asarray(TARGETS), "example_weights": jnp.ones(2)}
    family = family_of(OTHER)
    targets, weights = family.targets(batch, OTHER.tokens)
    # No BOS: the first token of each row is read, never predicted.
    np.testing.assert_array_equal(targets, TARGETS[:, 1:])
    np.testing.assert_array_equal(weights, TARGETS[:, 1:] != 5)
    np.testing.assert_array_equal(family.inputs(batch, OTHER.tokens)[0][0], TARGETS[:, :-1])
    no_pad = OTHER.override({"tokens.pad_id": -1})
    assert np.asarray(family.targets(batch, no_pad.tokens)[1]).all()
    # Packed documents: the first token of each is read, never predicted from the one before.
    segments = jnp.array([[1, 1, 2, 2, 2, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    packed = {**batch, "targets_segment_ids": segments}
    np.testing.assert_array_equal(
        family.targets(packed, OTHER.tokens)[1], [[1, 0, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]
    )


def test_a_tokenizer_with_other_ids_trains_one_step_and_decodes_with_them():
    tokenizer = OtherIdsTokenizer()
    info = DatasetInfo("other", "lm", 8, 0, 7, ("test",), tokenizer, **special_ids(tokenizer))
    check_token_ids(OTHER.tokens, info)
    with pytest.raises(ValueError, match=r"model.tokens.bos_id=1 differs .* set model.tokens"):
        check_token_ids(OTHER.override({"tokens.bos_id": 1}).tokens, info)
    with pytest.raises(ValueError, match="declares pad_id=5"):
        DatasetInfo("other", "lm", 8, 0, 7, ("test",), tokenizer)  # the default ids
    assert tokens.labels(tokenizer, [0, 5, 7, 6]) == ["a", "<pad>", "<eos>", "f"]

    model = build_model(OTHER)
    batch = {"targets": jnp.asarray(TARGETS), "example_weights": jnp.ones(2)}
    optimizer = optax.sgd(0.1)
    state = steps.init_state(model, optimizer, batch, jax.random.PRNGKey(0))
    new_state, metrics = steps.train_step(
        state, batch, model=model, optimizer=optimizer, label_smoothing=0.0
    )
    assert int(metrics["tokens"]) == 10  # 12 predicted tokens, 2 of them PAD
    # The loss is the mean over those of -log p(y_t+1 | y_1..y_t), from the unshifted rows.
    log_p = jax.nn.log_softmax(model.apply(state.variables, jnp.asarray(TARGETS[:, :-1])))
    picked = np.take_along_axis(np.asarray(log_p), TARGETS[:, 1:, None], axis=-1)[..., 0]
    real = TARGETS[:, 1:] != 5
    np.testing.assert_allclose(metrics["loss"], -picked[real].mean(), rtol=1e-5)
    assert not np.allclose(jax.tree.leaves(new_state.params)[0], jax.tree.leaves(state.params)[0])

    # Decoding: no BOS before the prompt, PAD never chosen, id 0 chosen, stop at EOS, PAD after.
    def step(cache, ids_B):  # PAD is always the most likely; then 3 -> 0 -> EOS
        logits_BV = jnp.zeros((ids_B.shape[0], 8)).at[:, 5].set(9.0)
        following_B = jnp.where(ids_B == 3, 0, jnp.where(ids_B == 0, 7, 4))
        return logits_BV.at[jnp.arange(ids_B.shape[0]), following_B].set(5.0), cache

    out = decoding.left_to_right(
        step, None, jnp.array([[3]], jnp.int32), max_new_tokens=4, tokens=OTHER.tokens
    )
    np.testing.assert_array_equal(out, [[3, 0, 7, 5, 5]])
    generated = decoding.generate(
        model,
        new_state.variables,
        jnp.array([[3, 0]], jnp.int32),
        decoding.DecodeConfig(max_new_tokens=4),
    )
    row = [int(t) for t in generated[0]]
    assert len(row) == 6 and row[:2] == [3, 0]  # the prompt, no BOS before it
    end = row.index(7) + 1 if 7 in row else len(row)
    assert 5 not in row[:end] and set(row[end:]) <= {5}


def test_an_encoder_decoder_without_bos_is_refused():
    with pytest.raises(ValueError, match="starts its decoder from BOS"):
        tiny_model("encoder_decoder", {"tokens.bos_id": -1})


# What writes ids writes the tokenizer's or the model's: PAD 5 and EOS 7 (BOS 6 where a search
# needs one) come out where PAD 0 and EOS 2 would be the datasets' convention.
WITH_BOS = TokenConfig(pad_id=5, bos_id=6, eos_id=7)


def test_rows_are_padded_and_ended_with_the_tokenizers_ids():
    row = batching.seq2seq_row([0, 1], [0], 4, 4, pad_id=5, eos_id=7)
    np.testing.assert_array_equal(row["inputs"], [0, 1, 5, 5])
    np.testing.assert_array_equal(row["targets"], [0, 7, 5, 5])
    row = batching.prompt_row([0], [1], 6, 6, pad_id=5, eos_id=7)
    np.testing.assert_array_equal(row["targets"], [0, 6, 1, 7, 5, 5])
    np.testing.assert_array_equal(row["targets_weights"], [0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(batching.pad([0, 1, 2], 3, None), [0, 1, 2])  # full: no PAD
    with pytest.raises(ValueError, match=r"needs a PAD id, and the tokenizer has none"):
        batching.pad([0, 1], 3, None)
    with pytest.raises(ValueError, match=r"rows end with EOS, and the tokenizer has none"):
        batching.with_eos([0], None)


def test_packed_rows_are_padded_with_the_tokenizers_pad():
    documents = [np.array([0, 1, 7], np.int32), np.array([0, 7], np.int32)]

    def packed(pad_id):
        rows = grain.MapDataset.source(documents).map(lambda ids: {"targets": ids})
        return list(
            pipeline.pack(
                rows.to_iter_dataset(),
                seq_len=8,
                num_bins=1,
                seed=0,
                shuffle_bins=False,
                pad_id=pad_id,
            )
        )

    (row,) = packed(5)
    np.testing.assert_array_equal(row["targets"], [0, 1, 7, 0, 7, 5, 5, 5])  # id 0 stays a token
    np.testing.assert_array_equal(row["targets_segment_ids"], [1, 1, 1, 2, 2, 0, 0, 0])
    with pytest.raises(ValueError, match=r"no PAD id \(pad_id=None\)"):
        packed(None)


def test_beam_search_fills_after_eos_with_the_models_pad_as_greedy_search_does():
    def step(cache, ids_B):  # PAD and BOS are the most likely; then 3 -> 0 -> EOS
        logits_BV = jnp.zeros((ids_B.shape[0], 8)).at[:, 5:7].set(9.0)
        following_B = jnp.where(ids_B == 3, 0, jnp.where(ids_B == 0, 7, 4))
        return logits_BV.at[jnp.arange(ids_B.shape[0]), following_B].set(5.0), cache

    prompt = jnp.array([[3]], jnp.int32)
    greedy = decoding.left_to_right(step, None, prompt, max_new_tokens=4, tokens=WITH_BOS)
    beam, _ = decoding.beam_search(
        step, None, prompt, beam_size=2, alpha=0.6, max_new_tokens=4, tokens=WITH_BOS
    )
    np.testing.assert_array_equal(greedy, [[3, 0, 7, 5, 5]])
    np.testing.assert_array_equal(beam, greedy)


def test_the_amy_vocabulary_skips_the_models_special_ids():
    words = ["g", "f", "e", "d", "c", "b", "a"]
    vocab = amy.word_vocabulary(words, OTHER.tokens)  # PAD 5, EOS 7: ids of no word
    assert vocab == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4, "f": 6, "g": 8}
    assert amy.word_vocabulary(["b", "a"], DATASET_TOKENS) == {"a": 3, "b": 4}


@pytest.mark.parametrize(
    "function, name",
    [
        (families.shift_right, "tokens"),
        (families.Family.inputs, "tokens"),
        (families.Family.targets, "tokens"),
        (decoding.left_to_right, "tokens"),
        (decoding.beam_search, "tokens"),
        (decoding.search.never_special, "tokens"),
        (decoding.search.initial_sequence, "tokens"),
        (losses.weights_from_targets, "pad_id"),
        (losses.sequence_accuracy, "weights"),
        (batching.pad, "pad_id"),
        (batching.with_eos, "eos_id"),
        (batching.seq2seq_row, "pad_id"),
        (batching.seq2seq_row, "eos_id"),
        (batching.prompt_row, "pad_id"),
        (batching.prompt_row, "eos_id"),
        (pipeline.pack, "pad_id"),
    ],
)
def test_what_reads_or_writes_special_ids_takes_them_without_a_default(function, name):
    """A caller that forgets the model's or tokenizer's ids gets a TypeError, never the
    datasets' PAD 0, BOS 1, EOS 2 in their place."""
    assert inspect.signature(function).parameters[name].default is inspect.Parameter.empty
