"""The public entry point: `load_dataset(config.data)`, built once per run and shared."""

from collections.abc import Sequence

import grain
import ml_collections

from transformer_jax.data import registry
from transformer_jax.data.batching import Batch
from transformer_jax.data.checks import require, require_at_least
from transformer_jax.data.info import DatasetInfo


class Dataset:
    """A prepared dataset: its facts, seeded training iterators and evaluation batches.

    Built by `load_dataset`, which checks the config and builds or prepares the data once;
    the methods only read it.
    """

    def __init__(self, implementation):
        self._implementation = implementation  # a registry implementation (see registry.py)
        self.info: DatasetInfo = implementation.info

    def train_iterator(self, *, seed: int, batch_size: int) -> grain.DatasetIterator:
        """Endless, seeded, checkpointable iterator of training batches (dicts of numpy arrays).

        Shapes follow the contract (e.g. seq2seq "inputs" [B, max_input_len], "targets"
        [B, max_target_len], "example_weights" [B]). `get_state()` returns a small dict that
        `set_state()` restores, so a resumed run sees exactly the batches it would have seen.
        """
        require_at_least("batch_size", batch_size, 1, prefix="")
        return iter(self._implementation.train_dataset(seed=seed, batch_size=batch_size))

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
        return self._implementation.eval_batches(
            split, batch_size=batch_size, max_examples=max_examples
        )

    def text_pairs(self, split: str, *, max_examples: int | None = None) -> list[tuple[str, str]]:
        """(source, target) raw text of `split` (its first `max_examples`), in the order of
        `eval_batches`: what decoded translations are scored against. Translation data only."""
        require(
            hasattr(self._implementation, "text_pairs"),
            "name",
            self.info.name,
            "a translation dataset with text references (multi30k, wmt14_translate/de-en)",
        )
        splits = self.info.eval_splits
        require(split in splits, "split", split, f"one of {splits}", prefix="")
        return self._implementation.text_pairs(split, max_examples=max_examples)


def load_dataset(data_config: ml_collections.ConfigDict) -> Dataset:
    """The dataset of `config.data`, after checking it and building or preparing it if needed."""
    return Dataset(registry.load(data_config))
