"""Image classification datasets behind the public API: digits (built offline), mnist, cifar10.

Batches (contract): "inputs" float32 (B, Y, X, C), pixels scaled to [0, 1]; "label" int32 [B];
"example_weights" float32 [B]. Training batches are augmented (data.random_shift,
data.random_flip), evaluation batches never are. The augmentation of training batch k draws from
a generator seeded with (seed, k), so the stream depends on the seed alone and a restored
iterator (whose state is one position) continues exactly.
"""

import math
from collections.abc import Callable, Sequence

import grain
import ml_collections
import numpy as np

from transformer_jax.data import augment, builders, pipeline
from transformer_jax.data.batching import Batch, add_example_weights, stack
from transformer_jax.data.checks import require, require_at_least
from transformer_jax.data.info import DatasetInfo
from transformer_jax.data.sources import open_split

_UINT8_MAX = 255
# name -> (height, width, channels, classes) of the TFDS image catalog's datasets, the facts
# `catalog_image_info` describes them by before (or without) their download.
_CATALOG_SHAPES = {"mnist": (28, 28, 1, 10), "cifar10": (32, 32, 3, 10)}


class EvalBatches(Sequence):
    """Batches of a split in order, read when indexed (a resized split may not fit in memory).

    The last batch is filled with zero rows of example_weights 0, as `rows_to_batches` does.
    """

    def __init__(self, read: Callable[[np.ndarray], Batch], num_examples: int, batch_size: int):
        self._read, self._n, self._batch_size = read, num_examples, batch_size

    def __len__(self) -> int:
        return math.ceil(self._n / self._batch_size)

    def __getitem__(self, i: int) -> Batch:
        if not -len(self) <= i < len(self):
            raise IndexError(f"batch {i} of {len(self)}")
        i %= len(self)
        start = i * self._batch_size
        batch = self._read(np.arange(start, min(self._n, start + self._batch_size)))
        rows = [{k: v[j] for k, v in batch.items()} for j in range(len(batch["label"]))]
        return stack(rows, self._batch_size)


class ImageClassificationData:
    """A TFDS split of {"image": uint8 (Y, X, C), "label": int} examples, read with grain.

    `max_value` is the brightest stored pixel value (255 for the catalog, 16 for digits).
    """

    def __init__(self, cfg: ml_collections.ConfigDict, tfds_name: str, max_value: int):
        _check_image_fields(cfg)
        self._cfg, self._tfds_name, self._max_value = cfg, tfds_name, max_value
        features = open_split(tfds_name, "train", cfg.data_dir).dataset_info.features
        height, width, channels = features["image"].shape
        require(
            cfg.image_size > 0 or (height and width),
            "image_size",
            cfg.image_size,
            f"> 0: the images of {cfg.name!r} have no fixed size",
        )
        self.info = _image_info(cfg, (height, width, channels), features["label"].num_classes)

    def _read_batch(
        self, source, indices: np.ndarray, rng: np.random.Generator | None = None
    ) -> Batch:
        """Reads, augments (when given `rng`), resizes and scales the examples at `indices`."""
        examples = [source[int(i)] for i in indices]
        images_BYXC = np.stack([np.asarray(ex["image"], np.uint8) for ex in examples])
        if rng is not None:
            images_BYXC = augment.random_shift(images_BYXC, self._cfg.random_shift, rng)
            if self._cfg.random_flip:
                images_BYXC = augment.random_flip(images_BYXC, rng)
        if self._cfg.image_size:
            images_BYXC = augment.resize(images_BYXC, self._cfg.image_size)
        return {
            "inputs": images_BYXC.astype(np.float32) / np.float32(self._max_value),
            "label": np.asarray([ex["label"] for ex in examples], dtype=np.int32),
        }

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        source = open_split(self._tfds_name, "train", self._cfg.data_dir)

        def make_batch(step: int, indices: np.ndarray) -> Batch:
            rng = np.random.default_rng((seed, step))
            return add_example_weights(self._read_batch(source, indices, rng))

        ds = grain.MapDataset.range(len(source)).shuffle(seed=seed).repeat()
        ds = ds.batch(batch_size, drop_remainder=True).map_with_index(make_batch)
        return ds.to_iter_dataset(pipeline.TRAIN_READ_OPTIONS)

    def eval_batches(
        self, split: str, *, batch_size: int, max_examples: int | None
    ) -> Sequence[Batch]:
        source = open_split(self._tfds_name, split, self._cfg.data_dir)
        n = len(source) if max_examples is None else min(len(source), max_examples)
        return EvalBatches(lambda indices: self._read_batch(source, indices), n, batch_size)


def digits_data(cfg: ml_collections.ConfigDict) -> ImageClassificationData:
    """scikit-learn's handwritten digits, built once into data_dir as a TFDS dataset."""
    require(
        1 <= cfg.num_test < builders.DIGITS_NUM_EXAMPLES,
        "num_test",
        cfg.num_test,
        f"1 .. {builders.DIGITS_NUM_EXAMPLES - 1} (the digits have "
        f"{builders.DIGITS_NUM_EXAMPLES} images)",
    )
    config = builders.digits_config(cfg.num_test, cfg.data_seed)
    builder = builders.Digits(config=config, data_dir=cfg.data_dir, file_format="array_record")
    builders.prepare(builder)
    return ImageClassificationData(
        cfg, f"{builder.name}/{config.name}", max_value=builders.DIGITS_MAX_VALUE
    )


def catalog_image_data(cfg: ml_collections.ConfigDict) -> ImageClassificationData:
    """A TFDS catalog dataset (mnist, cifar10) prepared as array_record under data_dir."""
    return ImageClassificationData(cfg, cfg.name, max_value=_UINT8_MAX)


def _check_image_fields(cfg: ml_collections.ConfigDict) -> None:
    require_at_least("random_shift", cfg.random_shift, 0)
    require_at_least("image_size", cfg.image_size, 0)


def catalog_image_info(cfg: ml_collections.ConfigDict) -> DatasetInfo:
    """The DatasetInfo `catalog_image_data(cfg)` has, from the config alone (no download),
    after the same field checks."""
    _check_image_fields(cfg)
    height, width, channels, classes = _CATALOG_SHAPES[cfg.name]
    return _image_info(cfg, (height, width, channels), classes)


def _image_info(cfg: ml_collections.ConfigDict, stored_shape, num_classes: int) -> DatasetInfo:
    """An image dataset's facts: images of `stored_shape` (height, width, channels), resized
    to data.image_size when it is set."""
    height, width, channels = stored_shape
    size = cfg.image_size
    return DatasetInfo(
        name=cfg.name,
        kind="classification",
        vocab_size=0,
        max_input_len=0,
        max_target_len=0,
        eval_splits=("test",),
        tokenizer=None,
        num_classes=num_classes,
        image_shape=(size, size, channels) if size else (height, width, channels),
    )
