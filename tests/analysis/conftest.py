"""A tiny trained copy run shared by the tests that read a run directory."""

import pytest

from transformer_jax import defaults
from transformer_jax.train.trainer import train_and_evaluate


def tiny_copy_config(data_dir, steps: int = 40):
    """A two-layer-encoder, one-layer-decoder copy run that trains in seconds on a CPU."""
    config = defaults.base_config("copy")
    config.model.update(d_model=32, num_encoder_layers=2, num_decoder_layers=1, dropout_rate=0.0)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 64
    config.data.update(
        data_dir=str(data_dir),
        num_train=1000,
        num_test=32,
        num_test_long=32,
        max_len=8,
        long_min_len=9,
        long_max_len=10,
        batch_size=16,
    )
    config.train.update(
        steps=steps,
        log_every=steps,
        eval_every=steps,
        checkpoint_every=steps,
        warmup_steps=5,
        diagnostics=False,
    )
    return config


@pytest.fixture(scope="session")
def copy_workdir(tmp_path_factory):
    """A run directory of a copy model trained for a few steps by the real training loop."""
    root = tmp_path_factory.mktemp("copy")
    train_and_evaluate(tiny_copy_config(root / "tfds", steps=20), str(root / "run"))
    return root / "run"
