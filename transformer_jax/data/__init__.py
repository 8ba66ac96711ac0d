"""Datasets as TFDS builders read with grain: algorithmic tasks, text files, Multi30k, TFDS
catalog.

Public API (used by the trainer and the analysis commands): `load_dataset(config.data)` returns
a `Dataset` (`.info`, `.train_iterator(seed=, batch_size=)`, `.eval_batches(split, ...)`, and
for translation `.text_pairs(split)`), built once per run; `describe_dataset(config.data)`, its
DatasetInfo without reading the data; DatasetInfo; default_data_config.
A dataset is a `DataSource` (api.py) registered in `DATASETS` (registry.py).
Token ids: each dataset's tokenizer declares its special ones (DatasetInfo.pad_id, bos_id,
eos_id); the project's own tokenizers have PAD 0, BOS 1, EOS 2, real tokens from 3.
"""

from transformer_jax.data.api import Dataset, DataSource
from transformer_jax.data.info import BOS_ID, EOS_ID, PAD_ID, DatasetInfo
from transformer_jax.data.registry import (
    DATASETS,
    default_data_config,
    describe_dataset,
    load_dataset,
)

__all__ = [
    "BOS_ID",
    "DATASETS",
    "EOS_ID",
    "PAD_ID",
    "DataSource",
    "Dataset",
    "DatasetInfo",
    "default_data_config",
    "describe_dataset",
    "load_dataset",
]
