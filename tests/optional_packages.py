"""Optional packages the suite needs for some tests (PyTorch, wandb, libtpu): without one, its
tests skip and say how to install it, except under CI (CI=true, as .ci/run sets), where a
missing package fails them instead of hiding them."""

import importlib
import os

import pytest


def require(module: str, name: str, requirements: str):
    """The imported `module`, or a skip (a failure under CI) naming the requirements file."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        missing = str(error)
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(
            f"CI=true but {name} is not installed ({missing}); CI must install "
            f"{requirements} (see .ci/run)",
            pytrace=False,
        )
    pytest.skip(f"{name} is not installed: pip install -r {requirements}")
