"""Shared test setup: strict rank promotion catches silent broadcasting bugs."""

import jax
import pytest


@pytest.fixture(autouse=True)
def _strict_rank_promotion():
    with jax.numpy_rank_promotion("raise"):
        yield
