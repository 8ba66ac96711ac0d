"""Typed text -> token ids for the commands that read a trained run (analysis/tokens.py)."""

import pytest

from transformer_jax.analysis import tokens
from transformer_jax.data.tokenizers import CharTokenizer, symbol_alphabet


def test_spaces_between_symbols_are_separators():
    symbols = CharTokenizer(symbol_alphabet(10))  # no whitespace: the algorithmic tasks
    assert tokens.encode(symbols, "3 1 4\t1 5", field="input") == [6, 4, 7, 4, 8]


def test_a_text_alphabet_keeps_every_character():
    text = CharTokenizer(" acehst", source="data.path=corpus.txt")
    assert text.decode(tokens.encode(text, "the cat", field="input")) == "the cat"


@pytest.mark.parametrize(
    ("typed", "unknown"),
    [("the cat sat\t", "'\\t'"), ("the cat\r", "'\\r'"), ("the Cat!", "'!C'")],
)
def test_characters_outside_a_text_alphabet_are_named(typed, unknown):
    """Not read without the whitespace the alphabet lacks: that would be another prompt."""
    text = CharTokenizer(" acehst", source="data.path=corpus.txt")
    with pytest.raises(ValueError) as error:
        tokens.encode(text, typed, field="input")
    message = str(error.value)
    assert message.startswith(f"--input={typed!r} has characters not in the vocabulary of ")
    assert f"data.path=corpus.txt: {unknown}; valid characters: ' acehst'" in message


def test_unknown_symbols_are_named_too():
    symbols = CharTokenizer(symbol_alphabet(10))
    with pytest.raises(ValueError, match=r"--input='3 x 4' has characters .*: 'x'; valid"):
        tokens.encode(symbols, "3 x 4", field="input")


def test_no_tokens_is_an_error():
    with pytest.raises(ValueError, match="has no tokens"):
        tokens.encode(CharTokenizer(symbol_alphabet(10)), "  ", field="input")
