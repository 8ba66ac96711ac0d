"""Text -> token ids and printable per-token labels, for the commands that read a trained run."""

from collections.abc import Sequence

from transformer_jax.data.info import BOS_ID, EOS_ID, PAD_ID, Tokenizer

SPECIAL_LABELS = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}


def encode(tokenizer: Tokenizer, text: str, field: str) -> list[int]:
    """Token ids of `text`; `field` names the flag in error messages.

    The algorithmic tasks' character vocabularies have no space symbol, so a text that only
    fails because of its whitespace is read without it: "3 1 4 1 5" is the five symbols 31415.
    """
    try:
        ids = tokenizer.encode(text)
    except ValueError as error:
        compact = "".join(text.split())
        if compact == text:
            raise ValueError(f"--{field}={text!r} cannot be tokenized: {error}") from error
        try:
            ids = tokenizer.encode(compact)
        except ValueError as error2:
            raise ValueError(f"--{field}={text!r} cannot be tokenized: {error2}") from error2
    if not ids:
        raise ValueError(f"--{field}={text!r} has no tokens; give at least one")
    return list(ids)


def labels(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """One printable label per id: the special names, else the decoded piece (or #id if empty)."""
    out = []
    for i in ids:
        i = int(i)
        label = SPECIAL_LABELS.get(i) or tokenizer.decode([i]).strip()
        out.append(label or f"#{i}")
    return out
