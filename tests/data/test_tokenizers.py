"""Tokenizers: contract ids, round trips, printing generated rows, SentencePiece caching."""

import numpy as np
import pytest

from transformer_jax.data.info import BOS_ID, EOS_ID, PAD_ID
from transformer_jax.data.tokenizers import CharTokenizer, load_or_train_sentencepiece


def test_char_tokenizer_ids_start_after_the_specials():
    tok = CharTokenizer("0123456789+")
    assert tok.vocab_size == 14
    assert tok.encode("12+9") == [4, 5, 13, 12]
    np.testing.assert_array_equal(tok.encode_array("12+9"), [4, 5, 13, 12])
    assert tok.decode([4, 5, 13, 12]) == "12+9"


def test_decode_prints_a_generated_row():
    tok = CharTokenizer("ab")
    # BOS and PAD are dropped; decoding stops at the first EOS.
    assert tok.decode([BOS_ID, 3, 4, 3, EOS_ID, 4, PAD_ID]) == "aba"
    assert tok.decode(np.array([3, 4, PAD_ID, PAD_ID])) == "ab"


def test_char_tokenizer_rejects_unknown_characters_and_ids():
    tok = CharTokenizer("ab")
    with pytest.raises(ValueError, match=r"character 'c' at position 2 .* valid characters: 'ab'"):
        tok.encode("abc")
    with pytest.raises(ValueError, match=r"token id 9 is out of range; valid ids: 0 \.\. 4"):
        tok.decode([3, 9])
    with pytest.raises(ValueError, match="repeated"):
        CharTokenizer("aba")


def test_sentencepiece_is_trained_once_and_cached(tmp_path):
    text = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 30
    calls = []

    def texts():
        calls.append(1)
        return iter(text)

    path = tmp_path / "spm.model"
    tok = load_or_train_sentencepiece(path, texts, vocab_size=40, max_chars=10_000)
    again = load_or_train_sentencepiece(path, texts, vocab_size=40, max_chars=10_000)
    assert len(calls) == 1 and path.exists()
    ids = tok.encode("the cat sat")
    assert ids == again.encode("the cat sat") and min(ids) >= 3
    assert tok.decode(ids + [EOS_ID, 7, PAD_ID]) == "the cat sat"
    assert tok.vocab_size <= 40
