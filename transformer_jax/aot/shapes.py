"""The shapes a run works with, without its data: the dataset's facts and abstract batches.

Datasets that are made or read locally (the algorithmic tasks, a text file, digits) are loaded
as a run loads them, so their facts are exact. Datasets that need a download are described from
their config instead, so that a run can be planned before (or without) fetching them:
SentencePiece data has `data.spm_vocab_size` ids and pads to the config's lengths, the image
catalog's shapes are fixed, and tiny_shakespeare has 65 characters.
"""

import ml_collections
import numpy as np
from jax import ShapeDtypeStruct

from transformer_jax import data
from transformer_jax.data.info import NUM_SPECIAL_IDS, DatasetInfo
from transformer_jax.data.registry import checked_config

# name -> (height, width, channels, classes) of the TFDS image catalog's datasets.
_IMAGE_CATALOG = {"mnist": (28, 28, 1, 10), "cifar10": (32, 32, 3, 10)}
_TINY_SHAKESPEARE_CHARACTERS = 65


def _translation(cfg) -> DatasetInfo:
    eval_len = cfg.get("eval_max_len", 0)
    return DatasetInfo(
        name=cfg.name,
        kind="seq2seq",
        vocab_size=cfg.spm_vocab_size,
        max_input_len=eval_len or cfg.max_input_len,
        max_target_len=eval_len or cfg.max_target_len,
        eval_splits=("validation", "test"),
        tokenizer=None,
        split_lengths={"train": (cfg.max_input_len, cfg.max_target_len)},
    )


def _lm1b(cfg) -> DatasetInfo:
    return DatasetInfo(cfg.name, "lm", cfg.spm_vocab_size, 0, cfg.seq_len, ("test",), None)


def _tiny_shakespeare(cfg) -> DatasetInfo:
    vocab = _TINY_SHAKESPEARE_CHARACTERS + NUM_SPECIAL_IDS
    return DatasetInfo(cfg.name, "lm", vocab, 0, cfg.seq_len, ("validation", "test"), None)


def _image_catalog(cfg) -> DatasetInfo:
    height, width, channels, classes = _IMAGE_CATALOG[cfg.name]
    size = cfg.image_size
    return DatasetInfo(
        name=cfg.name,
        kind="classification",
        vocab_size=0,
        max_input_len=0,
        max_target_len=0,
        eval_splits=("test",),
        tokenizer=None,
        num_classes=classes,
        image_shape=(size, size, channels) if size else (height, width, channels),
    )


_FROM_CONFIG = {
    "multi30k": _translation,
    "wmt14_translate/de-en": _translation,
    "lm1b": _lm1b,
    "tiny_shakespeare": _tiny_shakespeare,
    "mnist": _image_catalog,
    "cifar10": _image_catalog,
}


def planned_info(data_config: ml_collections.ConfigDict) -> DatasetInfo:
    """The DatasetInfo a run of `data_config` would see (see the module docstring)."""
    cfg = checked_config(data_config)
    if cfg.name in _FROM_CONFIG:
        return _FROM_CONFIG[cfg.name](cfg)
    return data.load_dataset(data_config).info


def split_lengths(info: DatasetInfo, split: str) -> tuple[int, int]:
    """(inputs, targets) lengths of `split`'s batches; "eval": the longest evaluation split."""
    if split != "eval":
        return info.padded_lengths(split)
    lengths = [info.padded_lengths(s) for s in info.eval_splits]
    return max(lengths, key=lambda pair: pair[0] + pair[1])


def abstract_batch(info: DatasetInfo, data_config, batch_size: int, split: str) -> dict:
    """ShapeDtypeStructs of a batch of `split` (see the contracts in transformer_jax/data)."""
    rows = (batch_size,)
    batch = {"example_weights": ShapeDtypeStruct(rows, np.float32)}
    if info.kind == "classification":
        batch["inputs"] = ShapeDtypeStruct((*rows, *info.image_shape), np.float32)
        batch["label"] = ShapeDtypeStruct(rows, np.int32)
        return batch
    input_len, target_len = split_lengths(info, split)
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
