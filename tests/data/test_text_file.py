"""Char-level LM on a local text file: split, vocabulary, windows, packing, rebuild on edit."""

import numpy as np
import pytest
from data_fixtures import all_rows, small_config

from transformer_jax.data import EOS_ID, load_dataset
from transformer_jax.data.char_lm import documents
from transformer_jax.data.tokenizers import CharTokenizer

TEXT = "".join(
    f"Line {i}: to be, or not to be -- é✓\n" + ("\n" if i % 3 == 0 else "") for i in range(80)
)


@pytest.fixture
def text_path(tmp_path):
    path = tmp_path / "play.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_vocabulary_is_the_sorted_characters_of_the_file(tmp_path, text_path):
    info = load_dataset(small_config("text_file", tmp_path, path=str(text_path))).info
    alphabet = "".join(sorted(set(TEXT)))
    assert info.kind == "lm" and info.eval_splits == ("validation",)
    assert info.vocab_size == 3 + len(alphabet)
    assert info.tokenizer.encode(alphabet) == list(range(3, 3 + len(alphabet)))
    assert info.tokenizer.decode(info.tokenizer.encode(TEXT)) == TEXT


def test_validation_is_the_last_tenth_of_the_characters(tmp_path, text_path):
    config = small_config("text_file", tmp_path, path=str(text_path), seq_len=16)
    dataset = load_dataset(config)
    cut = int(len(TEXT) * 0.9)
    for split, expected in (("validation", TEXT[cut:]), ("train", TEXT[:cut])):
        rows = all_rows(dataset.eval_batches(split, batch_size=8), "targets")
        assert all(r.shape == (16,) for r in rows)
        # Consecutive windows cover the split exactly once; only the last one is padded.
        assert "".join(dataset.info.tokenizer.decode(r) for r in rows) == expected
        assert len(rows) == -(-len(expected) // 16)


def test_a_test_split_leaves_train_as_it_was(tmp_path, text_path):
    """validation 0.05 + test 0.05 train on the same characters as validation 0.1 alone."""
    config = small_config(
        "text_file",
        tmp_path,
        path=str(text_path),
        seq_len=16,
        validation_fraction=0.05,
        test_fraction=0.05,
    )
    dataset = load_dataset(config)
    assert dataset.info.eval_splits == ("validation", "test")
    cut, test_cut = int(len(TEXT) * 0.9), int(len(TEXT) * 0.95)
    expected = {"train": TEXT[:cut], "validation": TEXT[cut:test_cut], "test": TEXT[test_cut:]}
    for split, text in expected.items():
        rows = all_rows(dataset.eval_batches(split, batch_size=8), "targets")
        assert "".join(dataset.info.tokenizer.decode(r) for r in rows) == text


def test_training_windows_are_substrings_of_the_train_split(tmp_path, text_path):
    config = small_config("text_file", tmp_path, path=str(text_path), seq_len=20)
    dataset = load_dataset(config)
    train_text = TEXT[: int(len(TEXT) * 0.9)]
    for batch in [next(dataset.train_iterator(seed=0, batch_size=32))]:
        assert batch["targets"].shape == (32, 20)
        for row in batch["targets"]:
            assert (row >= 3).all()  # full windows: no padding, no specials
            assert dataset.info.tokenizer.decode(row) in train_text


def test_editing_the_file_rebuilds_the_dataset(tmp_path, text_path):
    config = small_config("text_file", tmp_path, path=str(text_path), seq_len=8)
    before = load_dataset(config).info
    edited = TEXT.replace("be", "BE")
    text_path.write_text(edited, encoding="utf-8")
    after = load_dataset(config)
    alphabet = after.info.tokenizer.alphabet
    assert alphabet == "".join(sorted(set(edited))) != before.tokenizer.alphabet
    rows = all_rows(after.eval_batches("validation", batch_size=8), "targets")
    assert "BE" in "".join(after.info.tokenizer.decode(r) for r in rows)
    assert len(list((tmp_path / "local_text_file").iterdir())) == 2


def _segments(batch):
    """(tokens, positions) of every packed segment of every real row."""
    out = []
    for tokens, seg, pos, weight in zip(
        batch["targets"],
        batch["targets_segment_ids"],
        batch["targets_positions"],
        batch["example_weights"],
        strict=True,
    ):
        if not weight:
            continue
        assert (tokens[seg == 0] == 0).all() and (pos[seg == 0] == 0).all()
        ids = [s for s in np.unique(seg) if s]
        assert ids == list(range(1, len(ids) + 1))  # segments numbered 1, 2, ... in order
        for s in ids:
            out.append((tokens[seg == s], pos[seg == s]))
    return out


def test_packing_segment_ids_and_positions(tmp_path, text_path):
    config = small_config("text_file", tmp_path, path=str(text_path), seq_len=32, packing=True)
    dataset = load_dataset(config)
    info = dataset.info
    batch = next(dataset.train_iterator(seed=0, batch_size=8))
    assert {k: v.shape for k, v in batch.items()} == {
        "targets": (8, 32),
        "targets_segment_ids": (8, 32),
        "targets_positions": (8, 32),
        "example_weights": (8,),
    }
    segments = _segments(batch)
    assert any(len(np.unique(s)) > 1 for s in batch["targets_segment_ids"])  # some rows pack 2+
    for tokens, positions in segments:
        np.testing.assert_array_equal(positions, np.arange(len(tokens)))

    # Eval packs every paragraph piece exactly once.
    cut = int(len(TEXT) * 0.9)
    expected = documents(info.tokenizer, TEXT[cut:], 32)
    got = [t for b in dataset.eval_batches("validation", batch_size=4) for t, _ in _segments(b)]
    assert sorted(map(tuple, got)) == sorted(map(tuple, expected))
    assert all(p[-1] == EOS_ID for p in expected if len(p) < 32)


def test_documents_are_paragraphs_with_eos_cut_to_seq_len():
    tokenizer = CharTokenizer("abcd")
    pieces = documents(tokenizer, "ab\n\n\ncd\n\n  \n\nabcd", seq_len=3)
    a, b, c, d = 3, 4, 5, 6
    expected = [[a, b, EOS_ID], [c, d, EOS_ID], [a, b, c], [d, EOS_ID]]
    assert [p.tolist() for p in pieces] == expected
