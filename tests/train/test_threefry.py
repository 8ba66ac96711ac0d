"""`train.threefry`: which threefry scheme draws dropout masks, and that it only changes masks."""

import jax
import numpy as np
import pytest
from tiny_configs import tiny_model

from transformer_jax.config import TrainConfig
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.optimizer import make_optimizer


def run_steps(mode: str, dropout_rate: float, count: int = 2):
    cfg = tiny_model(
        "decoder_only",
        {"ffn.d_ff": 64},
        vocab_size=16,
        d_model=32,
        num_decoder_layers=1,
        dropout_rate=dropout_rate,
    )
    model = build_model(cfg)
    train = TrainConfig(threefry=mode, warmup_steps=0, steps=10)
    optimizer = make_optimizer(train, cfg.d_model)
    targets = np.random.default_rng(0).integers(3, 16, (4, 8)).astype(np.int32)
    batch = {"targets": targets, "example_weights": np.ones(4, np.float32)}
    state = steps.init_state(model, optimizer, batch, jax.random.key(0))
    step = jax.jit(steps.make_train_step(model, optimizer, train, num_devices=1))
    losses = []
    for _ in range(count):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    return losses


def test_schemes_differ_only_in_dropout_masks():
    assert run_steps("sequential", 0.0) == run_steps("partitionable", 0.0)
    sequential = run_steps("sequential", 0.3)
    assert sequential == run_steps("sequential", 0.3)  # Deterministic.
    assert sequential != run_steps("partitionable", 0.3)
    assert run_steps("auto", 0.3) == sequential  # One device: the fast scheme.


def test_auto_is_partitionable_on_several_devices():
    assert steps.threefry_partitionable("auto", num_devices=8)
    assert not steps.threefry_partitionable("auto", num_devices=1)
    assert steps.threefry_partitionable("partitionable", num_devices=1)
    with pytest.raises(ValueError, match="train.threefry='fast'"):
        steps.threefry_partitionable("fast", num_devices=1)
