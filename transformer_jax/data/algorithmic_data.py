"""The algorithmic seq2seq datasets (copy, reverse, sort, addition) behind the public API.

Batches (contract): "inputs" int32 [B, max_input_len] (symbols, PAD-padded, no BOS/EOS),
"targets" int32 [B, max_target_len] (answer, EOS, PAD), "example_weights" float32 [B]; PAD and
EOS are the task's tokenizer's.
With data.layout="prompt" (an "lm" dataset for decoder-only models) there are no "inputs":
"targets" holds inputs, "=", answer, EOS and "targets_weights" float32 [B, max_target_len] marks
the answer and its EOS, the only tokens scored.
"""

import os
import shutil
from collections.abc import Sequence
from functools import partial
from typing import Any

import grain
import ml_collections
import numpy as np

from transformer_jax.data import algorithmic, builders, pipeline
from transformer_jax.data.batching import Batch, prompt_row, rows_to_batches, seq2seq_row, stack
from transformer_jax.data.checks import require, require_at_least, resolve_max_len
from transformer_jax.data.info import DatasetInfo, special_ids
from transformer_jax.data.sources import open_split
from transformer_jax.data.tokenizers import MAX_NUM_SYMBOLS, CharTokenizer, symbol_alphabet

_READ_CHUNK = 1024  # examples per batched read when materialising an eval split
LAYOUTS = ("seq2seq", "prompt")
# data.bucket_by_length: none, every batch padded to its split's longest row; t2t,
# tensor2tensor's length buckets (`pipeline.t2t_bucket_boundaries`); each, one length per batch
# (Ruoss et al. 2023's curriculum draws one length per training step). A bucketed batch is
# padded to the power of two at or above its longest example (tensor2tensor's padded_batch pads
# to the longest itself; the random positions read the longest real row either way).
BUCKET_BY_LENGTH = ("none", "t2t", "each")
T2T_MAX_LENGTH = 256  # transformer_base_v1's max_length (models/transformer.py:1778)
PROMPT_SEPARATOR = "="  # between a prompt's inputs and answer; in no task's alphabet


def _check_variant(cfg: ml_collections.ConfigDict) -> None:
    require(cfg.layout in LAYOUTS, "layout", cfg.layout, LAYOUTS)
    require(
        cfg.bucket_by_length in BUCKET_BY_LENGTH,
        "bucket_by_length",
        cfg.bucket_by_length,
        BUCKET_BY_LENGTH,
    )
    require(cfg.variant in algorithmic.VARIANTS, "variant", cfg.variant, algorithmic.VARIANTS)
    for length in cfg.test_lengths:
        require(isinstance(length, int) and length >= 1, "test_lengths", cfg.test_lengths, ">= 1")
    if cfg.variant != "t2t":
        return
    t2t_only = f"one of {algorithmic.T2T_TASKS} with variant='t2t'"
    require(cfg.name in algorithmic.T2T_TASKS, "name", cfg.name, t2t_only)
    require(
        cfg.min_len == 1, "min_len", cfg.min_len, "1 with variant='t2t' (its lengths start at 1)"
    )
    if cfg.name == "addition":
        require(
            not cfg.reverse_answer,
            "reverse_answer",
            cfg.reverse_answer,
            "False with variant='t2t' (whose sums are always least significant digit first)",
        )
        shortest = min((cfg.max_len, *cfg.test_lengths))
        # Two operands of at least one digit and the separator.
        require(
            shortest >= 3,
            "max_len" if shortest == cfg.max_len else "test_lengths",
            shortest,
            ">= 3 input tokens for t2t addition",
        )
    else:
        require(cfg.num_symbols == 10, "num_symbols", cfg.num_symbols, "10 with variant='t2t'")


def _check_lengths(cfg: ml_collections.ConfigDict) -> None:
    require_at_least("min_len", cfg.min_len, 1)
    require(cfg.max_len >= cfg.min_len, "max_len", cfg.max_len, f">= min_len={cfg.min_len}")
    require_at_least("num_train", cfg.num_train, 1)
    require_at_least("num_test", cfg.num_test, 1)
    require_at_least("num_test_long", cfg.num_test_long, 0)
    require_at_least("num_validation", cfg.num_validation, 0)
    if cfg.num_test_long > 0 and cfg.variant == "t2t":
        require(
            cfg.long_max_len > cfg.max_len,
            "long_max_len",
            cfg.long_max_len,
            f"> max_len={cfg.max_len} (test_long must reach past train), or num_test_long=0",
        )
    elif cfg.num_test_long > 0:
        # test_long measures length generalisation, so it must be strictly longer than train.
        require(
            cfg.long_min_len > cfg.max_len,
            "long_min_len",
            cfg.long_min_len,
            f"> max_len={cfg.max_len} (test_long must be longer than train), or num_test_long=0",
        )
        require(
            cfg.long_max_len >= cfg.long_min_len,
            "long_max_len",
            cfg.long_max_len,
            f">= long_min_len={cfg.long_min_len}",
        )


def _check_disk(cfg: ml_collections.ConfigDict, row_tokens: int) -> None:
    """Refuses a dataset larger than the free space of data_dir (one byte per token: less than
    array_record stores), before its generation, which would fill the disk or run for days."""
    examples = cfg.num_train + cfg.num_test + cfg.num_test_long + cfg.num_validation
    examples += cfg.num_test * len(cfg.test_lengths)
    need = examples * row_tokens
    where = os.path.abspath(cfg.data_dir)
    while not os.path.isdir(where):
        where = os.path.dirname(where)
    free = shutil.disk_usage(where).free
    if need > free:
        raise ValueError(
            f"data.num_train={cfg.num_train} makes a dataset of at least {need / 2**30:,.1f} GiB "
            f"({examples:,} examples of {row_tokens} tokens), more than the "
            f"{free / 2**30:,.1f} GiB free in data.data_dir={cfg.data_dir}; valid: fewer examples"
        )


def algorithmic_info(cfg: ml_collections.ConfigDict) -> DatasetInfo:
    """The DatasetInfo of an algorithmic task from its checked config: nothing generated."""
    return AlgorithmicData(cfg, build=False).info


class AlgorithmicData:
    """Builds (once, into data_dir) and reads one algorithmic task; see `algorithmic.py`."""

    def __init__(self, cfg: ml_collections.ConfigDict, *, build: bool = True):
        """Checks `cfg` and, with `build`, builds the data (`algorithmic_info`: without)."""
        task = cfg.name
        is_addition = task == "addition"
        num_symbols = 10 if is_addition else cfg.num_symbols
        if not is_addition:
            require(
                2 <= num_symbols <= MAX_NUM_SYMBOLS,
                "num_symbols",
                num_symbols,
                f"2 .. {MAX_NUM_SYMBOLS}",
            )
        _check_variant(cfg)
        _check_lengths(cfg)
        variant = cfg.variant
        longest = max(
            (cfg.long_max_len if cfg.num_test_long > 0 else cfg.max_len, *cfg.test_lengths)
        )
        need_in, need_tgt = algorithmic.max_lengths(task, longest, variant)
        why = f"{task} with sequences up to {longest} " + ("digits" if is_addition else "symbols")
        max_input_len = resolve_max_len("max_input_len", cfg.max_input_len, need_in, why)
        max_target_len = resolve_max_len(
            "max_target_len", cfg.max_target_len, need_tgt, why + ", plus EOS"
        )

        config = builders.algorithmic_config(
            task=task,
            num_symbols=num_symbols,
            min_len=cfg.min_len,
            max_len=cfg.max_len,
            long_min_len=cfg.long_min_len,
            long_max_len=cfg.long_max_len,
            num_train=cfg.num_train,
            num_test=cfg.num_test,
            num_test_long=cfg.num_test_long,
            reverse_answer=is_addition and cfg.reverse_answer,  # an addition-only field
            data_seed=cfg.data_seed,
            variant=variant,
            test_lengths=tuple(cfg.test_lengths),
            num_validation=cfg.num_validation,
        )
        builder = builders.AlgorithmicSeq2seq(
            config=config, data_dir=cfg.data_dir, file_format="array_record"
        )
        if build and not builder.is_prepared():
            _check_disk(cfg, max_input_len + max_target_len)
            builders.prepare(builder)
        self.tfds_name = f"{builder.name}/{config.name}"
        self._data_dir = cfg.data_dir
        alphabet = algorithmic.ADDITION_ALPHABET if is_addition else symbol_alphabet(num_symbols)
        self._prompt = cfg.layout == "prompt"
        self._boundaries = (
            pipeline.t2t_bucket_boundaries(T2T_MAX_LENGTH)
            if cfg.bucket_by_length == "t2t"
            else None
        )
        self._bucketed = cfg.bucket_by_length != "none"
        if self._prompt:
            alphabet += PROMPT_SEPARATOR
        tokenizer = CharTokenizer(alphabet, source=f"the symbols of data.name={cfg.name!r}")
        by_length = {builders.length_split(n): n for n in cfg.test_lengths}
        eval_splits = ("test", "test_long") if cfg.num_test_long > 0 else ("test",)
        eval_splits += tuple(by_length)
        # Last, so that the first eval split (the default of analyses) stays test.
        eval_splits += ("validation",) if cfg.num_validation > 0 else ()
        split_lengths = {}
        if cfg.max_input_len == -1 and cfg.max_target_len == -1:
            # Derived lengths: each split is padded only as far as its sequences go.
            short = algorithmic.max_lengths(task, cfg.max_len, variant)
            split_lengths = {"train": short, "test": short, "validation": short}
            if cfg.num_test_long > 0:
                split_lengths["test_long"] = algorithmic.max_lengths(
                    task, cfg.long_max_len, variant
                )
            for split, n in by_length.items():
                split_lengths[split] = algorithmic.max_lengths(task, n, variant)
        if self._prompt:  # One decoder-only row: inputs, separator, answer, EOS.
            max_input_len, max_target_len = 0, max_input_len + 1 + max_target_len
            split_lengths = {k: (0, n + 1 + m) for k, (n, m) in split_lengths.items()}
        self.info = DatasetInfo(
            name=task,
            kind="lm" if self._prompt else "seq2seq",
            vocab_size=tokenizer.vocab_size,
            max_input_len=max_input_len,
            max_target_len=max_target_len,
            eval_splits=eval_splits,
            tokenizer=tokenizer,
            split_lengths=split_lengths,
            **special_ids(tokenizer),
            train_lengths_vary=self._bucketed,
        )
        # What rows are padded and ended with (the tokenizer's PAD and EOS), and the prompt
        # layout's separator (its id in the tokenizer).
        self._ids = {"pad_id": self.info.pad_id, "eos_id": self.info.eos_id}
        self._separator = tokenizer.encode(PROMPT_SEPARATOR)[0] if self._prompt else None

    def _rows(self, examples: Sequence[dict[str, Any]], split: str) -> list:
        input_len, target_len = self.info.padded_lengths(split)
        if self._prompt:
            return [
                prompt_row(ex["inputs"], ex["targets"], self._separator, target_len, **self._ids)
                for ex in examples
            ]
        return [
            seq2seq_row(ex["inputs"], ex["targets"], input_len, target_len, **self._ids)
            for ex in examples
        ]

    def _example_length(self, example: dict[str, Any]) -> int:
        """What a length bucket counts: a prompt row's tokens, or as tensor2tensor counts a
        pair, its longer side with the EOS it appends to both (utils/data_reader.py:44-53,
        data_generators/algorithmic.py:72-74)."""
        n_in, n_tgt = len(example["inputs"]), len(example["targets"])
        return n_in + n_tgt + 2 if self._prompt else max(n_in, n_tgt) + 1

    def _own_length_rows(self, examples: Sequence[dict[str, Any]], split: str) -> list:
        """Rows of a bucketed batch: padded to the power of two at or above these examples'
        longest, at most the split's length, so a few shapes compile (the offsets read the
        batch's longest real row, not its padding: layers/positional.batch_offset_bound)."""
        input_cap, target_cap = self.info.padded_lengths(split)
        if self._prompt:
            length = pipeline.padded_size(max(map(self._example_length, examples)), target_cap)
            return [
                prompt_row(ex["inputs"], ex["targets"], self._separator, length, **self._ids)
                for ex in examples
            ]
        input_len = pipeline.padded_size(max(len(ex["inputs"]) for ex in examples), input_cap)
        target_len = pipeline.padded_size(
            max(len(ex["targets"]) for ex in examples) + 1, target_cap
        )
        return [
            seq2seq_row(ex["inputs"], ex["targets"], input_len, target_len, **self._ids)
            for ex in examples
        ]

    def _read_batch(self, source, indices: np.ndarray) -> Batch:
        examples = source.__getitems__([int(i) for i in indices])
        rows = self._own_length_rows if self._bucketed else self._rows
        return stack(rows(examples, "train"))

    def _read_examples(self, source, n: int) -> list:
        examples = []
        for start in range(0, n, _READ_CHUNK):
            examples += source.__getitems__(list(range(start, min(n, start + _READ_CHUNK))))
        return examples

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        source = open_split(self.tfds_name, "train", self._data_dir)
        read_batch = partial(self._read_batch, source)
        if not self._bucketed:
            return pipeline.shuffled_index_batches(
                len(source), seed=seed, batch_size=batch_size, make_batch=read_batch
            )
        lengths = [self._example_length(ex) for ex in self._read_examples(source, len(source))]
        return pipeline.bucketed_index_batches(
            pipeline.length_buckets(np.asarray(lengths), self._boundaries),
            seed=seed,
            batch_size=batch_size,
            make_batch=lambda indices, _bucket: read_batch(indices),
        )

    def eval_batches(self, split: str, *, batch_size: int, max_examples: int | None) -> list:
        """The split's first `max_examples` in batches of `batch_size` (the last of each bucket
        filled with weight-0 rows); bucketed, each bucket's examples in their order, bucket by
        bucket, every batch padded to about its own longest example."""
        source = open_split(self.tfds_name, split, self._data_dir)
        n = len(source) if max_examples is None else min(len(source), max_examples)
        examples = self._read_examples(source, n)
        if not self._bucketed:
            return rows_to_batches(self._rows(examples, split), batch_size)
        lengths = np.asarray([self._example_length(ex) for ex in examples])
        bucket_of = pipeline.length_buckets(lengths, self._boundaries)
        batches = []
        for bucket in range(int(bucket_of.max()) + 1):
            members = [examples[i] for i in np.flatnonzero(bucket_of == bucket)]
            for start in range(0, len(members), batch_size):
                rows = self._own_length_rows(members[start : start + batch_size], split)
                batches.append(stack(rows, batch_size))
        return batches
