"""Shared test setup: strict rank promotion catches silent broadcasting bugs; the trainer's
malloc settings (transformer_jax/train/host_memory.py), set before JAX starts its threads."""

import jax
import pytest

from transformer_jax.train import host_memory

host_memory.reuse_freed_memory()


@pytest.fixture(autouse=True)
def _strict_rank_promotion():
    with jax.numpy_rank_promotion("raise"):
        yield
