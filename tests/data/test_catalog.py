"""TFDS catalog datasets through the same pipeline, with tfds.testing.mock_data.

mock_data replaces `builder.as_data_source`, so these tests need neither the real data nor
network; `as_data_source_fn` supplies known text where the test checks contents.
"""

import numpy as np
import pytest
import tensorflow_datasets as tfds
from data_fixtures import all_rows, small_config, unpadded

from transformer_jax.data import EOS_ID, load_dataset

SHAKESPEARE = {
    "train": "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak.\n" * 4,
    "validation": "Second Citizen:\nWould you proceed especially against Caius?\n",
    "test": "All:\nAgainst him first: he's a very dog to the commonalty.\n",
}


def _shakespeare_source(builder, split, **kwargs):
    del builder, kwargs
    return [{"text": SHAKESPEARE[split].encode("utf-8")}]  # array_record returns bytes


def test_tiny_shakespeare_is_char_level_over_all_splits(tmp_path):
    config = small_config("tiny_shakespeare", tmp_path, seq_len=16)
    with tfds.testing.mock_data(as_data_source_fn=_shakespeare_source):
        dataset = load_dataset(config)
        batch = next(dataset.train_iterator(seed=0, batch_size=4))
        rows = all_rows(dataset.eval_batches("test", batch_size=4), "targets")
    info = dataset.info
    assert info.tokenizer.alphabet == "".join(sorted(set("".join(SHAKESPEARE.values()))))
    assert info.eval_splits == ("validation", "test")
    assert batch["targets"].shape == (4, 16)
    for row in batch["targets"]:
        assert info.tokenizer.decode(row) in SHAKESPEARE["train"]
    assert "".join(info.tokenizer.decode(r) for r in rows) == SHAKESPEARE["test"]


def test_lm1b_sentences_get_a_trained_sentencepiece_and_packing(tmp_path):
    config = small_config("lm1b", tmp_path, seq_len=24, spm_vocab_size=40)
    with tfds.testing.mock_data(num_examples=40):
        dataset = load_dataset(config)
        batch = next(dataset.train_iterator(seed=0, batch_size=4))
        evals = dataset.eval_batches("test", batch_size=8, max_examples=10)
    info = dataset.info
    assert info.kind == "lm" and info.max_target_len == 24 and info.vocab_size <= 40
    assert (tmp_path / "lm1b" / "spm_unigram_v40_c10000000.model").exists()
    assert batch["targets"].shape == batch["targets_segment_ids"].shape == (4, 24)
    # Every packed segment is one sentence: its last token is EOS (sentences fit seq_len).
    for tokens, seg in zip(batch["targets"], batch["targets_segment_ids"], strict=True):
        for s in set(seg.tolist()) - {0}:
            assert tokens[seg == s][-1] == EOS_ID
    assert sum(b["example_weights"].sum() for b in evals) <= 10  # 10 sentences, packed
    assert {b["targets"].shape for b in evals} == {(8, 24)}


def test_lm1b_without_packing_has_one_sentence_per_row(tmp_path):
    config = small_config("lm1b", tmp_path, seq_len=24, spm_vocab_size=40, packing=False)
    with tfds.testing.mock_data(num_examples=10):
        batches = load_dataset(config).eval_batches("test", batch_size=4)
    assert [b["example_weights"].tolist() for b in batches][-1] == [1, 1, 0, 0]
    for row in all_rows(batches, "targets"):
        assert unpadded(row)[-1] == EOS_ID


def test_lm1b_text_not_in_utf8_is_named_before_sentencepiece_trains(tmp_path):
    def source(builder, split, **kwargs):
        del builder, split, kwargs
        return [{"text": b"the cat sat"}, {"text": b"on the\nmat, caf\xe9 au lait"}]

    config = small_config("lm1b", tmp_path, seq_len=24, spm_vocab_size=40)
    with tfds.testing.mock_data(as_data_source_fn=source), pytest.raises(ValueError) as error:
        load_dataset(config)
    assert str(error.value).startswith(
        f"the 'text' text of example 1 of the train split of data.name='lm1b' in "
        f"data.data_dir={str(tmp_path)!r} is not UTF-8 text (invalid byte at offset 15: 0xe9, "
        f"line 2); valid: UTF-8 text"
    )
    assert not list(tmp_path.rglob("*.model"))  # no SentencePiece model trained


def _wmt_source(builder, split, **kwargs):
    del builder, split, kwargs
    pairs = [("the house is small", "das haus ist klein"), ("the cat", "die katze")] * 20
    pairs.append(("a very long sentence " * 10, "ein sehr langer satz " * 10))
    return [{"en": en, "de": de} for en, de in pairs]


def test_wmt_translation_pairs(tmp_path):
    config = small_config(
        "wmt14_translate/de-en", tmp_path, max_input_len=12, max_target_len=12, spm_vocab_size=60
    )
    with tfds.testing.mock_data(as_data_source_fn=_wmt_source):
        dataset = load_dataset(config)
        iterator = dataset.train_iterator(seed=0, batch_size=8)
        train = [next(iterator) for _ in range(6)]  # > 1 epoch of 41 pairs
        evals = dataset.eval_batches("validation", batch_size=8)
    info = dataset.info
    assert info.kind == "seq2seq" and info.eval_splits == ("validation", "test")
    assert (tmp_path / "wmt14_translate" / "de-en").is_dir()
    tok = info.tokenizer
    inputs = np.concatenate([b["inputs"] for b in train])
    targets = np.concatenate([b["targets"] for b in train])
    for x, y in zip(inputs, targets, strict=True):
        assert (tok.decode(x), tok.decode(y)) in {
            ("the house is small", "das haus ist klein"),
            ("the cat", "die katze"),
        }
        assert unpadded(y)[-1] == EOS_ID
    # The over-long pair is dropped from training but truncated (EOS kept) for eval.
    assert len(all_rows(evals, "inputs")) == 41
    last_target = all_rows(evals, "targets")[-1]
    assert last_target[-1] == EOS_ID and (last_target[:-1] > 2).all()


def test_unprepared_catalog_dataset_is_a_clear_error(tmp_path):
    config = small_config("tiny_shakespeare", tmp_path)
    with pytest.raises(ValueError, match=r"'tiny_shakespeare' is not prepared .*tfds build"):
        load_dataset(config)


def test_reverse_direction_swaps_inputs_and_targets(tmp_path):
    config = small_config(
        "wmt14_translate/de-en",
        tmp_path,
        source_language="de",
        target_language="en",
        spm_vocab_size=60,
    )
    with tfds.testing.mock_data(as_data_source_fn=_wmt_source):
        dataset = load_dataset(config)
        batch = dataset.eval_batches("test", batch_size=2, max_examples=2)[0]
    info = dataset.info
    assert info.tokenizer.decode(batch["inputs"][0]) == "das haus ist klein"
    np.testing.assert_array_equal(batch["example_weights"], [1, 1])
