"""A dataset's batches without its data: ShapeDtypeStructs in the shapes of the batch contract
(transformer_jax/data/__init__.py), from a DatasetInfo (`describe_dataset`) and `config.data`,
for compiling a run's programs ahead of time (transformer_jax.aot)."""

import ml_collections
import numpy as np
from jax import ShapeDtypeStruct

from transformer_jax.data.info import DatasetInfo


def split_lengths(info: DatasetInfo, split: str) -> tuple[int, int]:
    """(inputs, targets) lengths of `split`'s batches; "eval": the longest evaluation split."""
    if split != "eval":
        return info.padded_lengths(split)
    return longest_lengths(info, info.eval_splits)


def longest_lengths(info: DatasetInfo, splits) -> tuple[int, int]:
    """(inputs, targets) lengths of the longest batches of `splits`."""
    lengths = [info.padded_lengths(s) for s in splits]
    return max(lengths, key=lambda pair: pair[0] + pair[1])


def abstract_batch(
    info: DatasetInfo,
    data_config: ml_collections.ConfigDict,
    batch_size: int,
    lengths: tuple[int, int],
) -> dict:
    """ShapeDtypeStructs of a batch of `batch_size` rows padded to `lengths` (inputs, targets;
    unused for images), with the optional fields `data_config` makes the data yield."""
    rows = (batch_size,)
    batch = {"example_weights": ShapeDtypeStruct(rows, np.float32)}
    if info.kind == "classification":
        batch["inputs"] = ShapeDtypeStruct((*rows, *info.image_shape), np.float32)
        batch["label"] = ShapeDtypeStruct(rows, np.int32)
        return batch
    input_len, target_len = lengths
    batch["targets"] = ShapeDtypeStruct((*rows, target_len), np.int32)
    if info.kind == "seq2seq":
        batch["inputs"] = ShapeDtypeStruct((*rows, input_len), np.int32)
    if data_config.get("layout") == "prompt":
        batch["targets_weights"] = ShapeDtypeStruct((*rows, target_len), np.float32)
    if data_config.get("packing"):
        batch["targets_segment_ids"] = ShapeDtypeStruct((*rows, target_len), np.int32)
        batch["targets_positions"] = ShapeDtypeStruct((*rows, target_len), np.int32)
    return batch


def zeros_like(batch: dict) -> dict:
    """Concrete zeros in the shapes of an abstract batch (for initialising a model on one)."""
    return {k: np.zeros(v.shape, v.dtype) for k, v in batch.items()}
