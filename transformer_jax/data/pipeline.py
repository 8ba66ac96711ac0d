"""grain building blocks shared by the datasets: shuffling, repeating, packing, batching.

Training pipelines are index-based grain datasets (`MapDataset.shuffle(seed).repeat()`), so
their iterator state is one position; `get_state()`/`set_state()` resume at exactly the same
next batch.
"""

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import grain
import numpy as np

from transformer_jax.data.batching import Batch, Row, add_example_weights

# Batches are prefetched by one background thread: enough to overlap the host work with a
# training step on a small machine without competing with XLA for cores.
TRAIN_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=4)
# Per-example pipelines (tokenizing catalog text) need a few threads and a deeper buffer.
EXAMPLE_READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=256)
EVAL_READ_OPTIONS = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def shuffled_index_batches(
    num_examples: int, *, seed: int, batch_size: int, make_batch: Callable[[np.ndarray], Batch]
) -> grain.IterDataset:
    """Endless batches built by `make_batch(indices int [batch_size])`, reshuffled every epoch.

    Batching indices first lets `make_batch` read and pad a whole batch with one vectorised
    call, much cheaper than one grain element per example. The order is that of grain's
    `MapDataset.range(num_examples).shuffle(seed).repeat().batch(batch_size)` (`shuffled_order`):
    batch k holds positions [k * batch_size, (k + 1) * batch_size) of the endless stream, so an
    epoch's last batch runs into the next epoch, and the iterator state is one position.
    """

    def batch(k: int) -> Batch:
        positions = np.arange(k * batch_size, (k + 1) * batch_size)
        return make_batch(shuffled_order(positions, num_examples, seed=seed))

    ds = grain.MapDataset.range(sys.maxsize // batch_size).map(batch)  # as many as grain's batch
    return ds.to_iter_dataset(TRAIN_READ_OPTIONS)


def shuffled_order(positions: np.ndarray, num_examples: int, *, seed: int) -> np.ndarray:
    """int64 [n]: the examples at `positions` of the endless stream that grain's
    `MapDataset.range(num_examples).shuffle(seed).repeat()` reads, without its per-element
    dataset calls (a training step of a small model on a CPU feels them): epoch e is grain's
    `index_shuffle` permutation of its examples with seed (seed + e) mod 2^32, 4 rounds."""
    epochs, within = np.divmod(positions, num_examples)
    return np.fromiter(
        (
            grain.experimental.index_shuffle(
                int(index), max_index=num_examples - 1, seed=int((seed + epoch) % 2**32), rounds=4
            )
            for index, epoch in zip(within, epochs, strict=True)
        ),
        np.int64,
        len(positions),
    )


def bucketed_index_batches(
    bucket_of: np.ndarray,
    *,
    seed: int,
    batch_size: int,
    make_batch: Callable[[np.ndarray, int], Batch],
) -> grain.IterDataset:
    """Endless batches of examples from one bucket each, built by `make_batch(indices, bucket)`.

    `bucket_of` int [num_examples] is each example's bucket (e.g. its padded length class).
    Every epoch shuffles each bucket, cuts it into full batches (the remainder sits the epoch
    out) and shuffles the order of all the batches, from a generator seeded with (seed, epoch):
    the number of batches per epoch is fixed, so the iterator state is still one position.
    Short sequences then train in short rows: fewer padded positions per step (as the
    tensor2tensor and fairseq length buckets), at a few shapes, each compiled once.
    """
    members = [np.flatnonzero(bucket_of == b) for b in range(int(bucket_of.max()) + 1)]
    per_epoch = sum(len(m) // batch_size for m in members)
    if per_epoch < 1:
        raise ValueError(
            f"batch_size={batch_size} is larger than every length bucket "
            f"(sizes {[len(m) for m in members]}); use a smaller data.batch_size"
        )

    @functools.lru_cache(maxsize=2)
    def plan(epoch: int) -> list[tuple[np.ndarray, int]]:
        rng = np.random.default_rng([seed, epoch])
        batches = []
        for bucket, indices in enumerate(members):
            shuffled = rng.permutation(indices)
            full = len(indices) // batch_size * batch_size
            batches += [(shuffled[i : i + batch_size], bucket) for i in range(0, full, batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def batch(k: int, _) -> Batch:
        return make_batch(*plan(k // per_epoch)[k % per_epoch])

    ds = grain.MapDataset.range(per_epoch).repeat().map_with_index(batch)
    return ds.to_iter_dataset(TRAIN_READ_OPTIONS)


def t2t_bucket_boundaries(max_length: int, min_length: int = 8, step: float = 1.1) -> list[int]:
    """tensor2tensor's default length-bucket boundaries, 8, 9, ..., 20, 22, 24, ..., 236 for its
    max_length 256 (utils/data_reader.py:71-79, `_bucket_boundaries`, with common_hparams.py's
    min_length_bucket=8 and length_bucket_step=1.1 and transformer_base_v1's max_length=256,
    models/transformer.py:1778): each boundary is max(x + 1, int(x * step)) of the one before."""
    boundaries, x = [], min_length
    while x < max_length:
        boundaries.append(x)
        x = max(x + 1, int(x * step))
    return boundaries


def length_buckets(lengths: np.ndarray, boundaries: Sequence[int] | None) -> np.ndarray:
    """int [n]: each length's bucket, numbered 0, 1, ... over the buckets that occur.

    With `boundaries`, bucket i holds the lengths in [boundaries[i-1], boundaries[i]), the first
    everything below boundaries[0], the last everything from boundaries[-1] on (as
    tf.data.experimental.bucket_by_sequence_length, which tensor2tensor batches with:
    utils/data_reader.py:447-450); None puts each length in its own bucket.
    """
    lengths = np.asarray(lengths)
    keys = lengths if boundaries is None else np.searchsorted(boundaries, lengths, side="right")
    return np.unique(keys, return_inverse=True)[1].reshape(lengths.shape)


def padded_size(longest: int, cap: int) -> int:
    """The padded length of a bucketed batch: the power of two at or above `longest`, at most
    `cap`; a handful of shapes, each compiled once."""
    return min(cap, 1 << max(longest - 1, 0).bit_length())


def shuffled_examples(
    source: Sequence[Any], *, seed: int, transform: Callable[[Any], Row]
) -> grain.IterDataset:
    """Endless `transform(example)` rows of `source`, reshuffled every epoch.

    `transform` may return None to drop an example (e.g. a too-long translation pair).
    """
    ds = grain.MapDataset.source(source).shuffle(seed=seed).repeat().map(transform)
    return ds.to_iter_dataset(EXAMPLE_READ_OPTIONS)


def pack(
    rows: grain.IterDataset,
    *,
    seq_len: int,
    num_bins: int,
    seed: int,
    shuffle_bins: bool,
    pad_id: int | None,
) -> grain.IterDataset:
    """First-fit packing of {"targets": int32 [n <= seq_len]} rows into [seq_len] rows, padded
    with `pad_id` (the tokenizer's PAD: what the loss and attention mask as padding).

    Adds "targets_segment_ids" (1, 2, ... per packed document, 0 on padding) and
    "targets_positions" (position within its document), as in the flax lm1b example.
    """
    if pad_id is None:
        raise ValueError(
            "packed rows end in padding, and the tokenizer has no PAD id (pad_id=None); valid: "
            "a tokenizer with a PAD id, or packing=False"
        )
    packed = grain.experimental.FirstFitPackIterDataset(
        rows,
        length_struct={"targets": seq_len},
        num_packing_bins=num_bins,
        seed=seed,
        shuffle_bins=shuffle_bins,
    )
    return packed.map(functools.partial(_pad_with, pad_id=pad_id))


def _pad_with(row: Row, *, pad_id: int) -> Row:
    """A packed row whose padding (segment id 0, which grain fills with zeros) is `pad_id`."""
    padding = row["targets_segment_ids"] == 0
    return {**row, "targets": np.where(padding, np.int32(pad_id), row["targets"])}


def train_batches(rows: grain.IterDataset, batch_size: int) -> grain.IterDataset:
    """Full batches of fixed-shape rows with example_weights 1."""
    return rows.batch(batch_size, drop_remainder=True).map(add_example_weights)
