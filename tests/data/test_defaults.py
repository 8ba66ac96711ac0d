"""default_data_config: one documented config per dataset, usable as config.data."""

import os

import pytest

from transformer_jax.data import DATASETS, default_data_config
from transformer_jax.data.registry import checked_config


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_defaults_are_complete_and_expanded(name):
    config = default_data_config(name)
    assert config.name == name and config.batch_size > 0
    assert "~" not in config.data_dir
    assert config.data_dir == os.path.expanduser("~/tensorflow_datasets")


def test_partial_config_is_filled_from_defaults():
    config = checked_config({"name": "reverse", "data_dir": "~/x", "max_len": 10})
    assert config.max_len == 10 and config.num_symbols == 10
    assert config.data_dir == os.path.expanduser("~/x")


def test_algorithmic_defaults_test_length_generalisation():
    config = default_data_config("copy")
    assert config.min_len == 1 and config.max_len < config.long_min_len <= config.long_max_len
