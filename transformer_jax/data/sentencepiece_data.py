"""Catalog datasets with a SentencePiece vocabulary: lm1b (LM) and wmt14 de-en (translation).

The datasets must already be prepared as array_record under data_dir. The SentencePiece model
is trained once on the start of the training split and cached in `<data_dir>/<name>/`, next to
the data, under a name that encodes the vocabulary size and training-corpus size.
Pipelines follow the flax lm1b / wmt examples: per-example tokenization in grain worker
threads, training pairs longer than the max lengths are dropped, eval pairs are truncated.
"""

import importlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grain
import ml_collections
import numpy as np

from transformer_jax.data import pipeline
from transformer_jax.data.batching import pad, rows_to_batches, seq2seq_row, with_eos
from transformer_jax.data.checks import require, require_at_least
from transformer_jax.data.info import DatasetInfo
from transformer_jax.data.sources import as_text, open_split
from transformer_jax.data.tokenizers import SentencePieceTokenizer, load_or_train_sentencepiece

WMT_LANGUAGES = ("de", "en")
# `import tensorflow_datasets` registers the legacy translate datasets lazily, on first access
# of `tfds.translate`; importing the module registers "wmt14_translate" for `tfds.data_source`.
_WMT14_MODULE = "tensorflow_datasets.translate.wmt14"


def _check_spm_fields(cfg: ml_collections.ConfigDict) -> None:
    require_at_least("spm_vocab_size", cfg.spm_vocab_size, 8)
    require_at_least("spm_max_chars", cfg.spm_max_chars, 1)


def _tokenizer(
    cfg: ml_collections.ConfigDict, source: Sequence[dict[str, Any]], keys: tuple[str, ...]
) -> SentencePieceTokenizer:
    model_path = (
        Path(cfg.data_dir)
        / cfg.name
        / f"spm_unigram_v{cfg.spm_vocab_size}_c{cfg.spm_max_chars}.model"
    )

    def texts() -> Iterator[str]:
        for i in range(len(source)):
            example = source[i]
            for key in keys:
                yield as_text(example[key])

    return load_or_train_sentencepiece(
        model_path, texts, vocab_size=cfg.spm_vocab_size, max_chars=cfg.spm_max_chars
    )


class Lm1bData:
    """One Billion Word benchmark (Chelba et al., 2013): sentences + EOS, optionally packed."""

    def __init__(self, cfg: ml_collections.ConfigDict):
        require_at_least("seq_len", cfg.seq_len, 2)
        _check_spm_fields(cfg)
        self._data_dir = cfg.data_dir
        self._seq_len = cfg.seq_len
        self._packing = cfg.packing
        self._tokenizer = _tokenizer(cfg, open_split(cfg.name, "train", cfg.data_dir), ("text",))
        self.info = DatasetInfo(
            name=cfg.name,
            kind="lm",
            vocab_size=self._tokenizer.vocab_size,
            max_input_len=0,
            max_target_len=cfg.seq_len,
            eval_splits=("test",),
            tokenizer=self._tokenizer,
        )

    def _document(self, example: dict[str, Any]) -> dict[str, np.ndarray]:
        ids = with_eos(self._tokenizer.encode(as_text(example["text"])))[: self._seq_len]
        return {"targets": ids if self._packing else pad(ids, self._seq_len)}

    def _rows(self, documents: grain.IterDataset, *, seed: int, num_bins: int, shuffle: bool):
        if not self._packing:
            return documents
        return pipeline.pack(
            documents, seq_len=self._seq_len, num_bins=num_bins, seed=seed, shuffle_bins=shuffle
        )

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        source = open_split(self.info.name, "train", self._data_dir)
        docs = pipeline.shuffled_examples(source, seed=seed, transform=self._document)
        rows = self._rows(docs, seed=seed, num_bins=batch_size, shuffle=True)
        return pipeline.train_batches(rows, batch_size)

    def eval_batches(self, split: str, *, batch_size: int, max_examples: int | None) -> list:
        source = open_split(self.info.name, split, self._data_dir)
        docs = grain.MapDataset.source(source)[:max_examples].map(self._document)
        docs = docs.to_iter_dataset(pipeline.EXAMPLE_READ_OPTIONS)
        return rows_to_batches(
            self._rows(docs, seed=0, num_bins=batch_size, shuffle=False), batch_size
        )


class TranslationData:
    """WMT'14 (Vaswani et al., 2017, Sec. 5.1) with one joint source/target SentencePiece vocab."""

    def __init__(self, cfg: ml_collections.ConfigDict):
        for field in ("source_language", "target_language"):
            require(cfg[field] in WMT_LANGUAGES, field, cfg[field], f"one of {WMT_LANGUAGES}")
        require(
            cfg.source_language != cfg.target_language,
            "target_language",
            cfg.target_language,
            f"a language other than source_language={cfg.source_language!r}",
        )
        require_at_least("max_input_len", cfg.max_input_len, 1)
        require_at_least("max_target_len", cfg.max_target_len, 2)
        _check_spm_fields(cfg)
        importlib.import_module(_WMT14_MODULE)
        self._data_dir = cfg.data_dir
        self._src, self._tgt = cfg.source_language, cfg.target_language
        self._tokenizer = _tokenizer(
            cfg, open_split(cfg.name, "train", cfg.data_dir), (self._src, self._tgt)
        )
        self.info = DatasetInfo(
            name=cfg.name,
            kind="seq2seq",
            vocab_size=self._tokenizer.vocab_size,
            max_input_len=cfg.max_input_len,
            max_target_len=cfg.max_target_len,
            eval_splits=("validation", "test"),
            tokenizer=self._tokenizer,
        )

    def _pair(self, example: dict[str, Any]) -> tuple[list[int], list[int]]:
        return (
            self._tokenizer.encode(as_text(example[self._src])),
            self._tokenizer.encode(as_text(example[self._tgt])),
        )

    def _train_row(self, example: dict[str, Any]):
        """The padded pair, or None (dropped) when it does not fit the max lengths."""
        inputs, targets = self._pair(example)
        if len(inputs) > self.info.max_input_len or len(targets) + 1 > self.info.max_target_len:
            return None
        return seq2seq_row(inputs, targets, self.info.max_input_len, self.info.max_target_len)

    def _eval_row(self, example: dict[str, Any]):
        """The padded pair, truncated so every eval example is scored (EOS kept last)."""
        inputs, targets = self._pair(example)
        i = self.info
        return seq2seq_row(
            inputs[: i.max_input_len],
            targets[: i.max_target_len - 1],
            i.max_input_len,
            i.max_target_len,
        )

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        source = open_split(self.info.name, "train", self._data_dir)
        rows = pipeline.shuffled_examples(source, seed=seed, transform=self._train_row)
        return pipeline.train_batches(rows, batch_size)

    def eval_batches(self, split: str, *, batch_size: int, max_examples: int | None) -> list:
        source = open_split(self.info.name, split, self._data_dir)
        rows = grain.MapDataset.source(source)[:max_examples].map(self._eval_row)
        return rows_to_batches(rows.to_iter_dataset(pipeline.EXAMPLE_READ_OPTIONS), batch_size)
