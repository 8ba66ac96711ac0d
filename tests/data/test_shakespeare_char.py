"""shakespeare_char: the char-rnn file checked by its sha256, split 90/5/5 by position."""

import hashlib
import os
from pathlib import Path

import pytest
from data_fixtures import all_rows, small_config

from transformer_jax.data import load_dataset
from transformer_jax.data.char_lm import SHAKESPEARE_SHA256

TEXT = "".join(f"CITIZEN {i}:\nBefore we proceed any further, hear me.\n\n" for i in range(40))


def _config(tmp_path, text: str = TEXT, **overrides):
    path = tmp_path / "input.txt"
    path.write_text(text, encoding="utf-8")
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return small_config("shakespeare_char", tmp_path, path=str(path), sha256=sha, **overrides)


def _split_text(dataset, split: str) -> str:
    rows = all_rows(dataset.eval_batches(split, batch_size=8), "targets")
    return "".join(dataset.info.tokenizer.decode(r) for r in rows)


def test_splits_are_the_first_90_then_5_then_5_percent_of_the_characters(tmp_path):
    dataset = load_dataset(_config(tmp_path, seq_len=16))
    assert dataset.info.name == "shakespeare_char"
    assert dataset.info.eval_splits == ("validation", "test")
    cut, test_cut = int(len(TEXT) * 0.90), int(len(TEXT) * 0.95)
    expected = {"train": TEXT[:cut], "validation": TEXT[cut:test_cut], "test": TEXT[test_cut:]}
    for split, text in expected.items():
        assert _split_text(dataset, split) == text


def test_a_file_with_another_hash_is_refused_naming_both_hashes(tmp_path):
    config = _config(tmp_path)
    config.sha256 = SHAKESPEARE_SHA256
    found = hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
    with pytest.raises(ValueError) as error:
        load_dataset(config)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"data.path={config.path!r}")
    assert SHAKESPEARE_SHA256 in message and found in message


def test_no_path_names_the_field_and_where_to_download(tmp_path):
    config = small_config("shakespeare_char", tmp_path)
    with pytest.raises(ValueError, match=r"^data\.path='' .*karpathy/char-rnn.*TINY_SHAKESPEARE"):
        load_dataset(config)


def test_the_real_file_when_present(tmp_path):
    """The shipped hash is the char-rnn file's: 1,115,394 characters, 65 distinct."""
    path = os.environ.get("TINY_SHAKESPEARE", "")
    if not path or not Path(path).is_file():
        pytest.skip("TINY_SHAKESPEARE does not name the char-rnn input.txt")
    config = small_config("shakespeare_char", tmp_path, path=path, seq_len=64)
    info = load_dataset(config).info
    assert info.vocab_size == 3 + 65
