"""Tokenizers: a character vocabulary and a SentencePiece word-piece vocabulary.

Each declares its special ids (`pad_id`, `bos_id`, `eos_id`; None where it has none). The
character vocabulary and the SentencePiece models take the project's convention
(transformer_jax.data.info: PAD = 0, BOS = 1, EOS = 2, real tokens from 3); a converted Hugging
Face tokenizer declares none (its model's are `model.tokens`). `decode` stops at the first EOS
and drops PAD/BOS, so it can print a generated or padded row directly.

A training run stores its tokenizer in its directory (`write_tokenizer`): readers decode with
the stored one (`read_tokenizer`) and a resume refuses data whose tokenizer differs from it
(`check_stored_tokenizer`), since the same ids would then mean other text.
"""

import hashlib
import json
import os
import string
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from transformer_jax import run_dir
from transformer_jax.data.info import BOS_ID, EOS_ID, NUM_SPECIAL_IDS, PAD_ID, Tokenizer

# Symbols of the algorithmic tasks print as characters. ASCII alphanumerics come first in
# code-point order, then CJK ideographs (all printable, code points above ASCII), so sorting
# token ids and sorting the printed characters agree (this matters for the `sort` task).
_ASCII_SYMBOLS = string.digits + string.ascii_uppercase + string.ascii_lowercase
_CJK_START = 0x4E00
MAX_NUM_SYMBOLS = len(_ASCII_SYMBOLS) + 20_000


def symbol_alphabet(num_symbols: int) -> str:
    """The first `num_symbols` printable symbols, in increasing code-point order."""
    if not 1 <= num_symbols <= MAX_NUM_SYMBOLS:
        raise ValueError(f"num_symbols={num_symbols} is invalid; valid: 1 .. {MAX_NUM_SYMBOLS}")
    extra = max(0, num_symbols - len(_ASCII_SYMBOLS))
    cjk = "".join(chr(_CJK_START + k) for k in range(extra))
    return (_ASCII_SYMBOLS + cjk)[:num_symbols]


def _strip_special(ids: Sequence[int], tokenizer: Tokenizer) -> list[int]:
    """Cuts at the first EOS and drops PAD/BOS, those of them `tokenizer` has."""
    dropped = {tokenizer.pad_id, tokenizer.bos_id} - {None}
    out = []
    for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist():
        if i == tokenizer.eos_id:
            break
        if i not in dropped:
            out.append(i)
    return out


class CharTokenizer:
    """One id per character: alphabet[k] <-> id FIRST_ID + k (3 + k), after the project's PAD,
    BOS and EOS, the ids it declares. `source` says where the alphabet came from (e.g. the
    corpus file), for error messages."""

    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID
    FIRST_ID = NUM_SPECIAL_IDS  # alphabet[0]'s id: the vocabulary layout this class defines

    def __init__(self, alphabet: str, source: str = "the alphabet"):
        if not alphabet:
            raise ValueError("CharTokenizer alphabet is empty; it needs at least one character")
        if len(set(alphabet)) != len(alphabet):
            raise ValueError(f"CharTokenizer alphabet has repeated characters: {alphabet!r}")
        self.alphabet = alphabet
        self.source = source
        codes = np.array([ord(c) for c in alphabet], dtype=np.uint32)
        order = np.argsort(codes)
        # Sorted code points + their ids let encode_array map a whole text with searchsorted.
        self._sorted_codes = codes[order]
        self._ids_of_sorted = (order + self.FIRST_ID).astype(np.int32)

    @property
    def vocab_size(self) -> int:
        return self.FIRST_ID + len(self.alphabet)

    def encode_array(self, text: str) -> np.ndarray:
        """Token ids of `text`, int32 [len(text)]; vectorised for long texts."""
        codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        pos = np.minimum(np.searchsorted(self._sorted_codes, codes), len(self._sorted_codes) - 1)
        known = self._sorted_codes[pos] == codes
        if not known.all():
            at = int(np.argmin(known))
            raise ValueError(
                f"character {text[at]!r} at position {at} is not in the vocabulary; "
                f"valid characters: {self.alphabet!r}"
            )
        return self._ids_of_sorted[pos]

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def decode(self, ids: Sequence[int]) -> str:
        chars = []
        for i in _strip_special(ids, self):
            if not self.FIRST_ID <= i < self.vocab_size:
                raise ValueError(
                    f"token id {i} is out of range; valid ids: 0 .. {self.vocab_size - 1}"
                )
            chars.append(self.alphabet[i - self.FIRST_ID])
        return "".join(chars)


class SentencePieceTokenizer:
    """SentencePiece model (Kudo & Richardson, 2018) with the project's pad 0, bos 1, eos 2 and
    unk 3 (as `train_sentencepiece` trains it; a model with other ids is refused)."""

    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID

    def __init__(self, model_path: str | os.PathLike):
        self.model_path = str(model_path)
        self.source = self.model_path
        try:
            self._sp = spm.SentencePieceProcessor(model_file=self.model_path)
        except RuntimeError as error:  # sentencepiece's for a missing or unparsable file
            raise ValueError(
                f"SentencePiece model {self.model_path} cannot be read ({error}); delete it to "
                "have it trained again, or restore it from a copy"
            ) from None
        got = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id())
        if got != (self.pad_id, self.bos_id, self.eos_id):
            raise ValueError(
                f"SentencePiece model {self.model_path} has (pad, bos, eos) ids {got}; "
                f"valid: {(self.pad_id, self.bos_id, self.eos_id)}, the ones this project's "
                "datasets pad and end their rows with"
            )

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def model_proto(self) -> bytes:
        """The model, serialized: what the model file holds."""
        return self._sp.serialized_model_proto()

    def encode(self, text: str) -> list[int]:
        return list(self._sp.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        kept = _strip_special(ids, self)
        bad = [i for i in kept if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(
                f"token id {bad[0]} is out of range; valid ids: 0 .. {self.vocab_size - 1}"
            )
        return self._sp.decode(kept)


class HuggingFaceTokenizer:
    """A Hugging Face tokenizer.json (the `tokenizers` package) of a converted model
    (transformer_jax/convert): its own ids, with no PAD/BOS/EOS convention of this project, so
    `decode` keeps every id."""

    pad_id = bos_id = eos_id = None  # the converted model's ids are its model.tokens

    def __init__(self, path: str | os.PathLike):
        self.source = str(path)
        try:
            import tokenizers
        except ImportError:
            raise ValueError(
                f"{path} is a Hugging Face tokenizer, read with the tokenizers package: pip "
                "install tokenizers"
            ) from None
        try:
            self._tokenizer = tokenizers.Tokenizer.from_file(self.source)
        except Exception as error:  # tokenizers raises its own Exception for unreadable files
            raise ValueError(
                f"{path} cannot be read as a Hugging Face tokenizer ({error})"
            ) from None

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)


def _training_lines(texts: Iterable[str], max_chars: int) -> list[str]:
    """Non-empty lines of `texts`, stopping once `max_chars` characters are collected."""
    lines, total = [], 0
    for text in texts:
        for line in text.splitlines():
            line = line.strip()
            if line:
                lines.append(line)
                total += len(line)
        if total >= max_chars:
            break
    return lines


def train_sentencepiece(
    texts: Iterable[str], model_path: Path, *, vocab_size: int, max_chars: int
) -> SentencePieceTokenizer:
    """Trains a unigram SentencePiece model on the first `max_chars` characters of `texts`.

    The file is written under a temporary name and renamed, so a crash or a concurrent run
    never leaves a half-written model at `model_path`.
    """
    lines = _training_lines(texts, max_chars)
    if not lines:
        raise ValueError(f"no text to train the SentencePiece model {model_path} on")
    model_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model_path.parent) as tmp:
        prefix = os.path.join(tmp, "spm")
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_prefix=prefix,
            vocab_size=vocab_size,
            model_type="unigram",
            character_coverage=1.0,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=NUM_SPECIAL_IDS,
            # Small corpora (tests, tiny files) cannot fill a large vocabulary; take what fits.
            hard_vocab_limit=False,
            minloglevel=2,
        )
        os.replace(prefix + ".model", model_path)
    return SentencePieceTokenizer(model_path)


def load_or_train_sentencepiece(
    model_path: Path, texts: Callable[[], Iterable[str]], *, vocab_size: int, max_chars: int
) -> SentencePieceTokenizer:
    """Loads the cached model at `model_path`, training it from `texts()` when missing."""
    if model_path.exists():
        return SentencePieceTokenizer(model_path)
    return train_sentencepiece(texts(), model_path, vocab_size=vocab_size, max_chars=max_chars)


def write_tokenizer(tokenizer: Tokenizer, directory: str | os.PathLike) -> None:
    """Stores `tokenizer` in a run directory as run_dir.TOKENIZER_FILE (a SentencePiece model is
    copied next to it as run_dir.TOKENIZER_MODEL_FILE), so the run never depends on the corpus
    or the data_dir cache it was built from."""
    if isinstance(tokenizer, CharTokenizer):
        spec = {"kind": "char", "alphabet": tokenizer.alphabet}
    elif isinstance(tokenizer, SentencePieceTokenizer):
        proto = tokenizer.model_proto
        run_dir.write_bytes(os.path.join(directory, run_dir.TOKENIZER_MODEL_FILE), proto)
        spec = {"kind": "sentencepiece", "sha256": hashlib.sha256(proto).hexdigest()}
    else:
        raise ValueError(f"cannot store a tokenizer of type {type(tokenizer).__name__}")
    spec["source"] = tokenizer.source
    # Its SHA-256 in the run's checksums.json: an edited alphabet is refused on reading.
    run_dir.write_recorded(directory, run_dir.TOKENIZER_FILE, run_dir.json_text(spec).encode())


def read_tokenizer(directory: str | os.PathLike) -> Tokenizer | None:
    """The tokenizer stored by `write_tokenizer`, or None when the directory holds none (image
    data, or a run written before runs stored their tokenizer).

    A stored tokenizer that cannot be read as written is a ValueError naming the file, never
    taken as absent (a resume would rebuild it from a corpus that may have changed since): a
    tokenizer.json cut short, a SentencePiece model missing, damaged or swapped for another
    (its sha256 differs from the one tokenizer.json recorded), a tokenizer.json whose bytes
    are not those the run's checksums.json records (an edited or permuted alphabet).
    """
    path = os.path.join(directory, run_dir.TOKENIZER_FILE)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        content = f.read()
    try:
        spec = json.loads(content)
    except ValueError:
        spec = None
    alphabet = spec.get("alphabet") if isinstance(spec, dict) else None
    char = isinstance(spec, dict) and spec.get("kind") == "char"
    if (
        not isinstance(spec, dict)
        or spec.get("kind") not in ("char", "sentencepiece", "huggingface")
        or (char and (not isinstance(alphabet, str) or not alphabet))
    ):
        raise ValueError(
            f"{path} is damaged (not the JSON of a stored tokenizer); restore it from a copy "
            "of the run, or train in a new --workdir"
        )
    run_dir.check_recorded(directory, run_dir.TOKENIZER_FILE, content)
    if spec["kind"] == "char":
        return CharTokenizer(alphabet, source=spec.get("source", "the alphabet"))
    if spec["kind"] == "huggingface":  # a converted model's (transformer_jax/convert/run.py)
        return HuggingFaceTokenizer(os.path.join(directory, str(spec.get("path"))))
    model_path = os.path.join(directory, run_dir.TOKENIZER_MODEL_FILE)
    try:
        with open(model_path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        raise ValueError(
            f"{model_path}, the SentencePiece model {path} stores, is missing; restore it from "
            "a copy of the run"
        ) from None
    if "sha256" in spec and digest != spec["sha256"]:
        raise ValueError(
            f"{model_path} is not the SentencePiece model the run trained with: its sha256 "
            f"{digest[:12]}... differs from {spec['sha256'][:12]}... recorded in {path}, so its "
            "ids would mean other text; restore the run's own model from a copy"
        )
    return SentencePieceTokenizer(model_path)


def check_stored_tokenizer(directory: str | os.PathLike, tokenizer: Tokenizer | None) -> bool:
    """Raises a ValueError naming the source of `tokenizer` and what differs when `directory`
    stores another tokenizer; returns whether it stores one."""
    stored = read_tokenizer(directory)
    if stored is None:
        return False
    difference = _difference(stored, tokenizer)
    if difference:
        path = os.path.join(directory, run_dir.TOKENIZER_FILE)
        raise ValueError(
            f"the vocabulary of {getattr(tokenizer, 'source', None)} differs from {path}, the "
            f"one the run trained with ({difference}), so its ids would mean other text; use "
            "the data the run trained on, or a new --workdir"
        )
    return True


def _difference(stored: Tokenizer, current: Tokenizer | None) -> str:
    """What differs between two tokenizers, or "" when they map text to the same ids."""
    if type(stored) is not type(current):
        return f"a {type(current).__name__}, not a {type(stored).__name__}"
    if isinstance(stored, CharTokenizer):
        if stored.alphabet == current.alphabet:
            return ""
        added = "".join(sorted(set(current.alphabet) - set(stored.alphabet)))
        removed = "".join(sorted(set(stored.alphabet) - set(current.alphabet)))
        if not added and not removed:
            return "the same characters in another order"
        return f"characters added: {added!r}, removed: {removed!r}"
    if stored.model_proto == current.model_proto:
        return ""
    sizes = (stored.vocab_size, current.vocab_size)
    first = next(
        (i for i in range(min(sizes)) if stored._sp.id_to_piece(i) != current._sp.id_to_piece(i)),
        min(sizes),
    )
    return f"{sizes[0]} and {sizes[1]} pieces, the first different at id {first}"
