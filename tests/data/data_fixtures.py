"""Small configs shared by the data tests (always built under a pytest tmp dir)."""

import numpy as np

from transformer_jax.data import default_data_config


def small_config(name: str, data_dir, **overrides):
    """`name`'s defaults shrunk so a build takes well under a second."""
    c = default_data_config(name)
    c.data_dir = str(data_dir)
    if name in ("copy", "reverse", "sort", "addition"):
        c.num_train, c.num_test, c.num_test_long = 300, 50, 30
        if name != "addition":
            c.max_len, c.long_min_len, c.long_max_len = 8, 9, 12
    for key, value in overrides.items():
        c[key] = value
    return c


def unpadded(row: np.ndarray) -> np.ndarray:
    """Tokens before the first 0 (PAD) of a row."""
    return row[: int(np.argmax(row == 0))] if (row == 0).any() else row


def all_rows(batches, key):
    """Rows of `key` over eval batches, real examples only (example_weights 1)."""
    return [r for b in batches for r, w in zip(b[key], b["example_weights"], strict=True) if w]
