"""Character-level language modelling on a text stream: a local file, shakespeare_char (the
char-rnn file, checked by its hash) or TFDS tiny_shakespeare.

Without packing, rows are windows of seq_len consecutive characters (training: every start
offset once per epoch, shuffled, as in nanoGPT's random crops; eval: consecutive windows
covering the split, the last one padded with PAD). With packing, documents are the paragraphs
(blank-line separated), each followed by EOS, cut into pieces of <= seq_len and packed
first-fit. Batches: "targets" int32 [B, seq_len] (+ "targets_segment_ids",
"targets_positions" when packed) and "example_weights" float32 [B].
"""

import hashlib
import re
from pathlib import Path

import grain
import ml_collections
import numpy as np

from transformer_jax.data import builders, pipeline
from transformer_jax.data.batching import Batch, add_example_weights, pad, rows_to_batches
from transformer_jax.data.checks import require, require_at_least, utf8_text
from transformer_jax.data.info import DatasetInfo, special_ids
from transformer_jax.data.sources import concatenated_text, open_split
from transformer_jax.data.tokenizers import CharTokenizer

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def documents(tokenizer: CharTokenizer, text: str, seq_len: int) -> list[np.ndarray]:
    """Paragraphs of `text` as token ids + EOS, cut into pieces of at most seq_len tokens."""
    pieces = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        if not paragraph.strip():
            continue
        ids = np.append(tokenizer.encode_array(paragraph), np.int32(tokenizer.eos_id))
        pieces += [ids[i : i + seq_len] for i in range(0, len(ids), seq_len)]
    return pieces


def _as_targets(ids: np.ndarray) -> dict[str, np.ndarray]:
    return {"targets": ids}


class CharStreamData:
    """Reads the splits of a text dataset whose examples concatenate to the split's text."""

    def __init__(
        self,
        *,
        name: str,
        tfds_name: str,
        data_dir: str,
        tokenizer: CharTokenizer,
        seq_len: int,
        packing: bool,
        eval_splits: tuple[str, ...],
    ):
        self.tfds_name = tfds_name
        self._data_dir = data_dir
        self._tokenizer = tokenizer
        self._seq_len = seq_len
        self._packing = packing
        self.info = DatasetInfo(
            name=name,
            kind="lm",
            vocab_size=tokenizer.vocab_size,
            max_input_len=0,
            max_target_len=seq_len,
            eval_splits=eval_splits,
            tokenizer=tokenizer,
            **special_ids(tokenizer),
        )

    def _text(self, split: str) -> str:
        return concatenated_text(open_split(self.tfds_name, split, self._data_dir))

    def _train_windows(self, tokens: np.ndarray, starts: np.ndarray) -> Batch:
        cols = np.arange(self._seq_len)
        return {"targets": tokens[starts[:, None] + cols[None, :]]}  # [B, seq_len]

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        text = self._text("train")
        if self._packing:
            docs = documents(self._tokenizer, text, self._seq_len)
            rows = pipeline.shuffled_examples(docs, seed=seed, transform=_as_targets)
            packed = pipeline.pack(
                rows,
                seq_len=self._seq_len,
                num_bins=batch_size,
                seed=seed,
                shuffle_bins=True,
                pad_id=self.info.pad_id,
            )
            return pipeline.train_batches(packed, batch_size)
        tokens = self._tokenizer.encode_array(text)
        # The whole batch is built in the pipeline's prefetch thread, off the training loop's.
        return pipeline.shuffled_index_batches(
            len(tokens) - self._seq_len + 1,
            seed=seed,
            batch_size=batch_size,
            make_batch=lambda starts: add_example_weights(self._train_windows(tokens, starts)),
        )

    def eval_batches(self, split: str, *, batch_size: int, max_examples: int | None) -> list:
        """Every window (or packed row) of the split once; max_examples caps windows/documents."""
        text = self._text(split)
        if self._packing:
            docs = documents(self._tokenizer, text, self._seq_len)[:max_examples]
            rows = grain.MapDataset.source(docs).map(_as_targets)
            packed = pipeline.pack(
                rows.to_iter_dataset(pipeline.EVAL_READ_OPTIONS),
                seq_len=self._seq_len,
                num_bins=batch_size,
                seed=0,
                shuffle_bins=False,
                pad_id=self.info.pad_id,
            )
            return rows_to_batches(packed, batch_size)
        return self.windows(
            split, length=self._seq_len, batch_size=batch_size, max_examples=max_examples
        )

    def windows(
        self, split: str, *, length: int, batch_size: int, max_examples: int | None
    ) -> list:
        """Consecutive windows of `length` characters covering the split (the last one
        padded with PAD), the first `max_examples` of them: the unpacked evaluation rows at any
        length, e.g. longer than the training windows. Packed rows restart their positions
        at every paragraph, so they are refused: no row would reach the longer positions."""
        require(not self._packing, "packing", self._packing, "False for windows of any length")
        tokens = self._tokenizer.encode_array(self._text(split))
        starts = range(0, len(tokens), length)[:max_examples]
        pad_id = self.info.pad_id
        rows = ({"targets": pad(tokens[s : s + length], length, pad_id)} for s in starts)
        return rows_to_batches(rows, batch_size)


def _check_seq_len(cfg: ml_collections.ConfigDict, train_chars: int) -> None:
    require_at_least("seq_len", cfg.seq_len, 1)
    # Unpacked training cuts windows of seq_len characters; the train split must hold one.
    require(
        cfg.packing or train_chars >= cfg.seq_len,
        "seq_len",
        cfg.seq_len,
        f"<= {train_chars}, the number of training characters (or packing=True)",
    )


def _read_text_file(path_value: str) -> tuple[Path, bytes, str]:
    require(bool(path_value), "path", path_value, "the path of a UTF-8 text file")
    path = Path(path_value).expanduser()
    require(path.is_file(), "path", path_value, "an existing file (not found or not a file)")
    content = path.read_bytes()
    require(len(content) > 0, "path", path_value, "a non-empty text file (this one is empty)")
    text = utf8_text(content, f"data.path={path_value!r}", "a UTF-8 encoded text file")
    return path, content, text


def text_file_data(cfg: ml_collections.ConfigDict) -> CharStreamData:
    """Char-level LM on `cfg.path`; the vocabulary is the sorted set of the file's characters."""
    fraction, test = cfg.validation_fraction, cfg.test_fraction
    require(0.0 < fraction < 1.0, "validation_fraction", fraction, "a number in (0, 1)")
    require(
        0.0 <= test < 1.0 - fraction,
        "test_fraction",
        test,
        f"a number in [0, {1.0 - fraction!r}) (train keeps the rest after validation_fraction)",
    )
    path, content, text = _read_text_file(cfg.path)
    return _local_text_data("text_file", cfg, path, content, text, fraction, test)


def _local_text_data(
    name: str,
    cfg: ml_collections.ConfigDict,
    path: Path,
    content: bytes,
    text: str,
    fraction: float,
    test: float,
) -> CharStreamData:
    """The CharStreamData of a text file read by `_read_text_file`, split by position."""
    sizes = {k: len(v) for k, v in builders.text_splits(text, fraction, test).items()}
    require(
        min(sizes.values()) > 0,
        "path",
        cfg.path,
        f"a file long enough for every split (split sizes in characters: {sizes})",
    )
    _check_seq_len(cfg, sizes["train"])
    config = builders.text_file_config(path.resolve(), content, fraction, test)
    builder = builders.LocalTextFile(
        config=config, data_dir=cfg.data_dir, file_format="array_record"
    )
    builders.prepare(builder)
    return CharStreamData(
        name=name,
        tfds_name=f"{builder.name}/{config.name}",
        data_dir=cfg.data_dir,
        tokenizer=CharTokenizer(
            builder.info.metadata["vocabulary"], source=f"data.path={cfg.path}"
        ),
        seq_len=cfg.seq_len,
        packing=cfg.packing,
        eval_splits=("validation", "test") if test else ("validation",),
    )


# karpathy/char-rnn data/tinyshakespeare/input.txt: 1,115,394 characters, 65 distinct.
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
# Split by position: the first 90% of the characters train, the next 5% validate, the last 5%
# test (nanoGPT's shakespeare_char validates on the last 10%; the 10% are halved here).
SHAKESPEARE_VALIDATION, SHAKESPEARE_TEST = 0.05, 0.05


def shakespeare_char_data(cfg: ml_collections.ConfigDict) -> CharStreamData:
    """Tiny shakespeare from karpathy/char-rnn's input.txt at `cfg.path`, refused unless its
    sha256 is `cfg.sha256` (another file, or an edited one, would change every figure silently);
    split 90/5/5 by position as `SHAKESPEARE_VALIDATION` and `SHAKESPEARE_TEST` say."""
    require(
        bool(cfg.path),
        "path",
        cfg.path,
        f"the path of tiny shakespeare's input.txt (download {SHAKESPEARE_URL}; configs read "
        "it from the TINY_SHAKESPEARE environment variable)",
    )
    path, content, text = _read_text_file(cfg.path)
    found = hashlib.sha256(content).hexdigest()
    require(
        found == cfg.sha256,
        "path",
        cfg.path,
        f"a file with sha256 {cfg.sha256} (data.sha256); this one has sha256 {found}",
    )
    return _local_text_data(
        "shakespeare_char", cfg, path, content, text, SHAKESPEARE_VALIDATION, SHAKESPEARE_TEST
    )


def tiny_shakespeare_data(cfg: ml_collections.ConfigDict) -> CharStreamData:
    """tiny_shakespeare from the TFDS catalog (must be prepared); characters of all splits."""
    texts = {
        s: concatenated_text(open_split("tiny_shakespeare", s, cfg.data_dir))
        for s in ("train", "validation", "test")
    }
    _check_seq_len(cfg, len(texts["train"]))
    return CharStreamData(
        name="tiny_shakespeare",
        tfds_name="tiny_shakespeare",
        data_dir=cfg.data_dir,
        tokenizer=CharTokenizer(
            "".join(sorted(set("".join(texts.values())))),
            source=f"tiny_shakespeare in data.data_dir={cfg.data_dir}",
        ),
        seq_len=cfg.seq_len,
        packing=cfg.packing,
        eval_splits=("validation", "test"),
    )


_TINY_SHAKESPEARE_CHARACTERS = 65  # distinct characters over its three splits


def tiny_shakespeare_info(cfg: ml_collections.ConfigDict) -> DatasetInfo:
    """The DatasetInfo `tiny_shakespeare_data(cfg)` has, from the config alone (no download)."""
    # The ids and size of a CharTokenizer of that many characters: its declared layout.
    vocab = CharTokenizer.FIRST_ID + _TINY_SHAKESPEARE_CHARACTERS
    return DatasetInfo(
        cfg.name,
        "lm",
        vocab,
        0,
        cfg.seq_len,
        ("validation", "test"),
        None,
        **special_ids(CharTokenizer),
    )
