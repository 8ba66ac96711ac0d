"""The dropout-free train step draws no random bits; with dropout it draws them from the keys
documented in train/step.py (fold_in(rng, step)), so committed runs keep their masks."""

import re

import jax
import numpy as np
import optax
import pytest
from tiny_configs import tiny_model

from transformer_jax.config import TrainConfig
from transformer_jax.families import family_of
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.optimizer import make_optimizer

ALL_DROPOUTS = ("dropout_rate", "attention.dropout_rate", "ffn.dropout_rate")


def random_bit_ops(hlo: str) -> list[str]:
    """The instructions of a compiled HLO module that generate random bits: XLA's
    RngBitGenerator / Rng (JAX's "rbg" keys), or threefry's rounds, the step's only `xor`."""
    return re.findall(r"= \S+ (rng-bit-generator|rng|xor)\(", hlo)


def setup(rates: dict, grad_accum_steps: int = 1):
    cfg = tiny_model("decoder_only", {name: 0.0 for name in ALL_DROPOUTS} | rates)
    model = build_model(cfg)
    train = TrainConfig(warmup_steps=0, steps=10, grad_accum_steps=grad_accum_steps)
    optimizer = make_optimizer(train, cfg.d_model)
    targets = np.random.default_rng(0).integers(3, cfg.vocab_size, (4, 8)).astype(np.int32)
    batch = {"targets": targets, "example_weights": np.ones(4, np.float32)}
    state = steps.init_state(model, optimizer, batch, jax.random.key(0))
    step = jax.jit(steps.make_train_step(model, optimizer, train, num_devices=1))
    return model, state, batch, step


def compiled_hlo(rates: dict, grad_accum_steps: int = 1) -> str:
    _, state, batch, step = setup(rates, grad_accum_steps)
    return step.lower(state, batch).compile().as_text()


@pytest.mark.parametrize("grad_accum_steps", [1, 2])  # 2: the micro-batches' lax.scan
def test_dropout_free_step_draws_no_random_bits(grad_accum_steps):
    assert random_bit_ops(compiled_hlo({}, grad_accum_steps)) == []


@pytest.mark.parametrize("name", ["dropout_rate", "attention.dropout_rate"])
def test_a_step_with_dropout_draws_random_bits(name):
    assert len(random_bit_ops(compiled_hlo({name: 0.3}))) > 0


def test_dropout_masks_come_from_fold_in_of_the_run_key_and_step():
    """Two steps' losses equal the model applied with the dropout key fold_in(state.rng, step)
    under the threefry scheme one device uses (train.threefry="auto": sequential)."""
    model, state, batch, step = setup({"dropout_rate": 0.3})
    args, kwargs = family_of(model.config).inputs(batch, model.config.tokens)
    for _ in range(2):
        key = jax.random.fold_in(state.rng, state.step)
        with jax.threefry_partitionable(False):
            logits_BTV = model.apply(
                {"params": state.params}, *args, train=True, rngs={"dropout": key}, **kwargs
            )
        without_dropout = model.apply({"params": state.params}, *args, train=False, **kwargs)
        assert not np.allclose(logits_BTV, without_dropout)  # The masks were applied.
        expected = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, batch["targets"])
        state, metrics = step(state, batch)
        np.testing.assert_allclose(float(metrics["loss"]), float(expected.mean()), rtol=1e-6)
