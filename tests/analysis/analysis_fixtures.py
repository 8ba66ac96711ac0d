"""Shared check for the analysis tests: a command wrote a real PNG."""

from pathlib import Path

from transformer_jax.analysis.figures import PNG_SIGNATURE


def assert_png(path) -> None:
    data = Path(path).read_bytes()
    assert len(data) > 1000, f"{path} is only {len(data)} bytes"
    assert data[:8] == PNG_SIGNATURE
