"""Text -> token ids and printable per-token labels, for the commands that read a trained run."""

from collections.abc import Sequence

from transformer_jax.data.info import Tokenizer

# The names of a tokenizer's special ids, those it has (`pad_id`, `bos_id`, `eos_id`).
SPECIAL_NAMES = {"pad_id": "<pad>", "bos_id": "<bos>", "eos_id": "<eos>"}


def encode(tokenizer: Tokenizer, text: str, field: str) -> list[int]:
    """Token ids of `text`; `field` names the flag in error messages.

    A character vocabulary without any whitespace (the algorithmic tasks' symbols) reads typed
    whitespace as a separator: "3 1 4 1 5" is the five symbols 31415. One with whitespace (a
    text corpus's alphabet) takes the text as it is: a character it lacks, whitespace included,
    is an error naming it, never dropped, since the prompt would then be another text.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        # Python passes on argv's bytes that are not UTF-8 as the surrogates U+DC80..U+DCFF.
        code = ord(text[error.start])
        bad = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise ValueError(
            f"--{field} is not UTF-8 text ({bad} at character {error.start}); give UTF-8 text "
            "(check the encoding of the terminal or the file it came from)"
        ) from None
    encoded = text
    alphabet = getattr(tokenizer, "alphabet", None)
    if alphabet is not None:
        unknown = set(text) - set(alphabet)
        if not any(c.isspace() for c in alphabet):
            encoded = "".join(text.split())
            unknown = {c for c in unknown if not c.isspace()}
        if unknown:
            raise ValueError(
                f"--{field}={text!r} has characters not in the vocabulary of "
                f"{tokenizer.source}: {''.join(sorted(unknown))!r}; valid characters: "
                f"{alphabet!r}"
            )
    try:
        ids = tokenizer.encode(encoded)
    except ValueError as error:
        raise ValueError(f"--{field}={text!r} cannot be tokenized: {error}") from error
    if not ids:
        raise ValueError(f"--{field}={text!r} has no tokens; give at least one")
    return list(ids)


def labels(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """One printable label per id: the names of the tokenizer's special ids, else the decoded
    piece (or #id if empty)."""
    special = {}
    for field, name in SPECIAL_NAMES.items():  # an id that is both BOS and EOS is "<bos>"
        special.setdefault(getattr(tokenizer, field, None), name)
    special.pop(None, None)
    out = []
    for i in ids:
        i = int(i)
        label = special.get(i) or tokenizer.decode([i]).strip()
        out.append(label or f"#{i}")
    return out
