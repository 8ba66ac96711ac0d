"""What a dataset provides (`DataSource`) and what the trainer and the analyses get from it
(`Dataset`, built once per run by `load_dataset(config.data)` in registry.py).

A dataset is a class (or a function returning an object) that satisfies `DataSource`, built from
its checked `config.data`, and one `DatasetEntry` in `registry.DATASETS`; see docs/adding.md.
"""

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import grain

from transformer_jax.data.batching import Batch
from transformer_jax.data.checks import require, require_at_least
from transformer_jax.data.info import DatasetInfo


@runtime_checkable
class DataSource(Protocol):
    """The methods a dataset must provide. Built from the checked `config.data` (the registry's
    `build`), which is the one place to validate fields and to build or prepare the data (a TFDS
    builder, a tokenizer): the methods only read what it prepared, and are called with arguments
    `Dataset` has already checked.

    Batches are dicts of numpy arrays in the contract of `info.kind` (transformer_jax/data/
    __init__.py): seq2seq "inputs" int32 (B, max_input_len), "targets" int32 (B, max_target_len)
    ending in EOS then PAD (the tokenizer's: `info.eos_id`, `info.pad_id`), "example_weights"
    float32 (B,); lm "targets" only (optionally "targets_weights", "targets_segment_ids",
    "targets_positions"); classification "inputs" (token ids or images) and "targets" (B,)
    labels.
    """

    info: DatasetInfo  # vocabulary, padded lengths, eval splits, tokenizer: see DatasetInfo

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        """Endless training batches of `batch_size` rows, shuffled from `seed` alone, as a grain
        dataset whose iterator checkpoints its position (get_state / set_state), so that a
        resumed run reads exactly the batches it would have read."""
        ...

    def eval_batches(
        self, split: str, *, batch_size: int, max_examples: int | None
    ) -> Sequence[Batch]:
        """Batches covering `split` ("train" or one of `info.eval_splits`) once, in a fixed
        order, its first `max_examples` examples when not None; the last batch is filled with
        zero rows of example_weights 0 to the training shapes."""
        ...


@runtime_checkable
class TextPairSource(DataSource, Protocol):
    """A translation dataset, which also gives the raw text its evaluation batches encode."""

    def text_pairs(self, split: str, *, max_examples: int | None) -> list[tuple[str, str]]:
        """(source, target) text of `split`'s first `max_examples`, in eval_batches' order."""
        ...


class Dataset:
    """A prepared dataset: its facts, seeded training iterators and evaluation batches.

    Built by `load_dataset`, which checks the config and builds or prepares the data once;
    the methods only read it.
    """

    def __init__(self, source: DataSource):
        self._source = source
        self.info: DatasetInfo = source.info

    def train_iterator(self, *, seed: int, batch_size: int) -> grain.DatasetIterator:
        """Endless, seeded, checkpointable iterator of training batches (dicts of numpy arrays).

        Shapes follow the contract (e.g. seq2seq "inputs" [B, max_input_len], "targets"
        [B, max_target_len], "example_weights" [B]). `get_state()` returns a small dict that
        `set_state()` restores, so a resumed run sees exactly the batches it would have seen.
        """
        require_at_least("batch_size", batch_size, 1, prefix="")
        return iter(self._source.train_dataset(seed=seed, batch_size=batch_size))

    def eval_batches(
        self, split: str, *, batch_size: int, max_examples: int | None = None
    ) -> Sequence[Batch]:
        """Batches covering `split` once (its first `max_examples` examples when given).

        Every batch has the training shapes; rows added to fill the last batch are zeros with
        example_weights 0. A list, or for images a sequence that reads each batch when indexed.
        """
        require_at_least("batch_size", batch_size, 1, prefix="")
        if max_examples is not None:
            require(
                max_examples >= 1,
                "max_examples",
                max_examples,
                "None or an integer >= 1",
                prefix="",
            )
        splits = ("train",) + self.info.eval_splits
        require(split in splits, "split", split, f"one of {splits}", prefix="")
        return self._source.eval_batches(split, batch_size=batch_size, max_examples=max_examples)

    def windows(
        self, split: str, *, length: int, batch_size: int, max_examples: int | None = None
    ) -> Sequence[Batch]:
        """Batches of consecutive `length`-token windows of a text stream's split (character
        LMs, unpacked), at a length other than the training one; a ValueError naming the
        dataset when it is not such a stream."""
        read = getattr(self._source, "windows", None)
        require(
            read is not None,
            "name",
            self.info.name,
            "a text stream read in consecutive windows (text_file, shakespeare_char, "
            "tiny_shakespeare)",
        )
        require_at_least("length", length, 1, prefix="")
        return read(split, length=length, batch_size=batch_size, max_examples=max_examples)

    def text_pairs(self, split: str, *, max_examples: int | None = None) -> list[tuple[str, str]]:
        """(source, target) raw text of `split` (its first `max_examples`), in the order of
        `eval_batches`: what decoded translations are scored against. Translation data only."""
        require(
            isinstance(self._source, TextPairSource),
            "name",
            self.info.name,
            "a translation dataset with text references (multi30k, wmt14_translate/de-en)",
        )
        splits = self.info.eval_splits
        require(split in splits, "split", split, f"one of {splits}", prefix="")
        return self._source.text_pairs(split, max_examples=max_examples)
