"""A tiny trained copy run shared by the tests that read a run directory."""

import pytest
from tiny_configs import tiny_copy_config

from transformer_jax.train.trainer import train_and_evaluate


@pytest.fixture(scope="session")
def copy_workdir(tmp_path_factory):
    """A run directory of a copy model trained for a few steps by the real training loop."""
    root = tmp_path_factory.mktemp("copy")
    config = tiny_copy_config(
        root / "tfds",
        20,
        model={"num_encoder_layers": 2, "dropout_rate": 0.0},
        data={"num_train": 1000, "num_test": 32, "num_test_long": 32, "long_max_len": 10},
        log_every=20,
        eval_every=20,
        checkpoint_every=20,
        diagnostics=False,
    )
    train_and_evaluate(config, str(root / "run"))
    return root / "run"
