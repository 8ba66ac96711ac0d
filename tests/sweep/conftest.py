"""The sweep tests' project directory: configs/, experiments/ and the stand-in trainer."""

import os

import pytest
from sweep_fixtures import FAKE_CONFIG, FAKE_MAIN, SWEEP_FILE

import transformer_jax

REPO = os.path.dirname(os.path.dirname(os.path.abspath(transformer_jax.__file__)))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A directory laid out like the repo: configs/, experiments/ and the stand-in trainer."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "fake.py").write_text(FAKE_CONFIG)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "demo.py").write_text(SWEEP_FILE)
    (tmp_path / "fake_main.py").write_text(FAKE_MAIN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), REPO]))
    return tmp_path
