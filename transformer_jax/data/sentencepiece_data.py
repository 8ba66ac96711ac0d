"""Datasets with a SentencePiece vocabulary: lm1b (LM), and translation (wmt14, multi30k).

The catalog datasets (lm1b, wmt14) must already be prepared as array_record under data_dir;
multi30k is built there on first use (see `transformer_jax.data.multi30k`). The SentencePiece
model is trained once on the start of the training split and cached under data_dir, next to the
data, under a name that encodes the vocabulary size and training-corpus size.
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
import tensorflow_datasets as tfds

from transformer_jax.data import builders, multi30k, pipeline
from transformer_jax.data.batching import Batch, pad, rows_to_batches, seq2seq_row, stack, with_eos
from transformer_jax.data.checks import require, require_at_least
from transformer_jax.data.info import DatasetInfo, special_ids
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
    cfg: ml_collections.ConfigDict,
    source: Sequence[dict[str, Any]],
    keys: tuple[str, ...],
    directory: Path | None = None,
) -> SentencePieceTokenizer:
    """The cached model in `directory` (default `<data_dir>/<data.name>`), trained if missing."""
    directory = Path(cfg.data_dir) / cfg.name if directory is None else directory
    model_path = directory / f"spm_unigram_v{cfg.spm_vocab_size}_c{cfg.spm_max_chars}.model"

    def texts() -> Iterator[str]:
        where = f"of the train split of data.name={cfg.name!r} in data.data_dir={cfg.data_dir!r}"
        for i in range(len(source)):
            example = source[i]
            for key in keys:
                yield as_text(example[key], f"the {key!r} text of example {i} {where}")

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
            **special_ids(self._tokenizer),
        )

    def _document(self, example: dict[str, Any]) -> dict[str, np.ndarray]:
        ids = with_eos(self._tokenizer.encode(as_text(example["text"])), self.info.eos_id)[
            : self._seq_len
        ]
        return {"targets": ids if self._packing else pad(ids, self._seq_len, self.info.pad_id)}

    def _rows(self, documents: grain.IterDataset, *, seed: int, num_bins: int, shuffle: bool):
        if not self._packing:
            return documents
        return pipeline.pack(
            documents,
            seq_len=self._seq_len,
            num_bins=num_bins,
            seed=seed,
            shuffle_bins=shuffle,
            pad_id=self.info.pad_id,
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


def _check_translation_fields(cfg: ml_collections.ConfigDict) -> None:
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


class TranslationData:
    """WMT'14 (Vaswani et al., 2017, Sec. 5.1) with one joint source/target SentencePiece vocab.

    The vocabulary is trained on both languages in a fixed order (de, en), so both directions
    share it.
    """

    def __init__(self, cfg: ml_collections.ConfigDict):
        _check_translation_fields(cfg)
        importlib.import_module(_WMT14_MODULE)
        self._open(cfg, cfg.name)

    def _open(
        self,
        cfg: ml_collections.ConfigDict,
        tfds_name: str,
        *,
        vocab_dir: Path | None = None,
        eval_max_len: int | None = None,
    ) -> None:
        """Reads the prepared `tfds_name`, its vocabulary cached in `vocab_dir`. With
        `eval_max_len`, only training rows have the max lengths; eval rows have this one."""
        self.tfds_name = tfds_name
        self._data_dir = cfg.data_dir
        self._src, self._tgt = cfg.source_language, cfg.target_language
        train = open_split(tfds_name, "train", cfg.data_dir)
        self._tokenizer = _tokenizer(cfg, train, WMT_LANGUAGES, vocab_dir)
        self.info = DatasetInfo(
            name=cfg.name,
            kind="seq2seq",
            vocab_size=self._tokenizer.vocab_size,
            max_input_len=eval_max_len or cfg.max_input_len,
            max_target_len=eval_max_len or cfg.max_target_len,
            eval_splits=("validation", "test"),
            tokenizer=self._tokenizer,
            **special_ids(self._tokenizer),
            split_lengths={"train": (cfg.max_input_len, cfg.max_target_len)},
        )
        # What rows are padded and ended with: the tokenizer's PAD and EOS.
        self._ids = {"pad_id": self.info.pad_id, "eos_id": self.info.eos_id}

    def _pair(self, example: dict[str, Any]) -> tuple[list[int], list[int]]:
        return (
            self._tokenizer.encode(as_text(example[self._src])),
            self._tokenizer.encode(as_text(example[self._tgt])),
        )

    def _train_row(self, example: dict[str, Any]):
        """The padded pair, or None (dropped) when it does not fit the training lengths."""
        inputs, targets = self._pair(example)
        input_len, target_len = self.info.padded_lengths("train")
        if len(inputs) > input_len or len(targets) + 1 > target_len:
            return None
        return seq2seq_row(inputs, targets, input_len, target_len, **self._ids)

    def _eval_row(self, example: dict[str, Any], split: str):
        """The padded pair, truncated so every eval example is scored (EOS kept last)."""
        inputs, targets = self._pair(example)
        input_len, target_len = self.info.padded_lengths(split)
        return seq2seq_row(
            inputs[:input_len], targets[: target_len - 1], input_len, target_len, **self._ids
        )

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        source = open_split(self.tfds_name, "train", self._data_dir)
        rows = pipeline.shuffled_examples(source, seed=seed, transform=self._train_row)
        return pipeline.train_batches(rows, batch_size)

    def eval_batches(self, split: str, *, batch_size: int, max_examples: int | None) -> list:
        source = open_split(self.tfds_name, split, self._data_dir)
        rows = grain.MapDataset.source(source)[:max_examples].map(
            lambda example: self._eval_row(example, split)
        )
        return rows_to_batches(rows.to_iter_dataset(pipeline.EXAMPLE_READ_OPTIONS), batch_size)

    def text_pairs(self, split: str, *, max_examples: int | None) -> list[tuple[str, str]]:
        """(source, target) raw text of the first `max_examples` examples of `split` (all when
        None), in the order of `eval_batches`: the references that BLEU scores against."""
        source = open_split(self.tfds_name, split, self._data_dir)
        n = len(source) if max_examples is None else min(len(source), max_examples)
        examples = (source[i] for i in range(n))
        return [(as_text(ex[self._src]), as_text(ex[self._tgt])) for ex in examples]


def _check_multi30k_fields(cfg: ml_collections.ConfigDict) -> None:
    _check_translation_fields(cfg)
    longest = max(cfg.max_input_len, cfg.max_target_len)
    buckets = tuple(cfg.length_buckets)
    require(
        all(isinstance(n, int) and 1 <= n < longest for n in buckets)
        and buckets == tuple(sorted(set(buckets))),
        "length_buckets",
        buckets,
        f"increasing token counts, each >= 1 and < max(max_input_len, max_target_len) = "
        f"{longest}, or ()",
    )
    require(
        cfg.eval_max_len >= longest,
        "eval_max_len",
        cfg.eval_max_len,
        f">= max(max_input_len, max_target_len) = {longest}",
    )


class Multi30kData(TranslationData):
    """Multi30k task 1 (see `transformer_jax.data.multi30k`), built into data_dir on first use:
    downloaded, or from data.manual_dir offline. Training pairs are padded to their length
    bucket (data.length_buckets, then max_input_len / max_target_len; longer pairs are dropped),
    validation and test to eval_max_len (longer ones truncated), so training computes on short
    rows and no test input is cut."""

    def __init__(self, cfg: ml_collections.ConfigDict):
        _check_multi30k_fields(cfg)
        if cfg.manual_dir:
            missing = [f for f in multi30k.FILES if not (Path(cfg.manual_dir) / f).is_file()]
            require(
                not missing,
                "manual_dir",
                cfg.manual_dir,
                f"a directory holding {list(multi30k.FILES)} (missing: {missing}), or '' to "
                "download them",
            )
            for name in multi30k.FILES:  # a damaged or non-UTF-8 file: stop before any writing
                multi30k.read_lines(Path(cfg.manual_dir) / name)
        builder = multi30k.make_builder(
            cfg.source_language,
            cfg.target_language,
            data_dir=cfg.data_dir,
            manual_dir=cfg.manual_dir,
        )
        download = tfds.download.DownloadConfig(manual_dir=cfg.manual_dir or None)
        builders.prepare(builder, download_config=download)
        # One vocabulary for both directions of the same files.
        content = multi30k.content_id(builder.builder_config.sha256)
        vocab_dir = (
            Path(cfg.data_dir) / builder.name / ("vocab" + (f"-{content}" if content else ""))
        )
        self._open(
            cfg,
            f"{builder.name}/{builder.builder_config.name}",
            vocab_dir=vocab_dir,
            eval_max_len=cfg.eval_max_len,
        )
        longest_bucket = (cfg.max_input_len, cfg.max_target_len)
        self._bucket_lengths = [(n, n) for n in cfg.length_buckets] + [longest_bucket]

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        """Batches from length buckets (data.length_buckets) of the train split, which is
        tokenized once here (29,000 pairs): see `pipeline.bucketed_index_batches`."""
        source = open_split(self.tfds_name, "train", self._data_dir)
        pairs = [self._pair(source[i]) for i in range(len(source))]
        fits = np.array(
            [[len(x) <= i and len(y) + 1 <= t for i, t in self._bucket_lengths] for x, y in pairs]
        )
        kept = np.flatnonzero(fits.any(axis=1))  # pairs longer than the max lengths are dropped
        bucket_of = np.argmax(fits[kept], axis=1)  # the first bucket that holds the pair

        def make_batch(indices: np.ndarray, bucket: int) -> Batch:
            lengths = self._bucket_lengths[bucket]
            return stack([seq2seq_row(*pairs[kept[i]], *lengths, **self._ids) for i in indices])

        return pipeline.bucketed_index_batches(
            bucket_of, seed=seed, batch_size=batch_size, make_batch=make_batch
        )


def lm1b_info(cfg: ml_collections.ConfigDict) -> DatasetInfo:
    """The DatasetInfo `Lm1bData(cfg)` has, from the config alone (no download): a
    SentencePiece vocabulary has exactly `spm_vocab_size` ids."""
    require_at_least("seq_len", cfg.seq_len, 2)
    _check_spm_fields(cfg)
    return DatasetInfo(
        cfg.name,
        "lm",
        cfg.spm_vocab_size,
        0,
        cfg.seq_len,
        ("test",),
        None,
        **special_ids(SentencePieceTokenizer),  # the ids its tokenizer will declare
    )


def translation_info(cfg: ml_collections.ConfigDict) -> DatasetInfo:
    """The DatasetInfo `TranslationData(cfg)` or `Multi30kData(cfg)` has, from the config alone
    (no download), after the same field checks; Multi30k's training rows at their longest
    bucket, its max lengths."""
    eval_len = cfg.get("eval_max_len", 0)
    (_check_multi30k_fields if eval_len else _check_translation_fields)(cfg)
    return DatasetInfo(
        name=cfg.name,
        kind="seq2seq",
        vocab_size=cfg.spm_vocab_size,
        max_input_len=eval_len or cfg.max_input_len,
        max_target_len=eval_len or cfg.max_target_len,
        eval_splits=("validation", "test"),
        tokenizer=None,
        split_lengths={"train": (cfg.max_input_len, cfg.max_target_len)},
        **special_ids(SentencePieceTokenizer),  # the ids its tokenizer will declare
    )
