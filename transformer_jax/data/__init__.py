"""Datasets as TFDS builders read with grain: algorithmic tasks, text files, TFDS catalog.

Public API (used by the trainer): DatasetInfo, get_dataset_info, make_train_iterator,
make_eval_batches, default_data_config. Token ids: PAD 0, BOS 1, EOS 2, real tokens from 3.
"""

from transformer_jax.data.api import get_dataset_info, make_eval_batches, make_train_iterator
from transformer_jax.data.info import BOS_ID, EOS_ID, PAD_ID, DatasetInfo
from transformer_jax.data.registry import DATASETS, default_data_config

__all__ = [
    "BOS_ID",
    "DATASETS",
    "EOS_ID",
    "PAD_ID",
    "DatasetInfo",
    "default_data_config",
    "get_dataset_info",
    "make_eval_batches",
    "make_train_iterator",
]
