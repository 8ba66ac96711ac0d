"""The persistent compilation cache a run compiles through (train/compile_cache.py)."""

import json
import os
import subprocess
import sys

import pytest

from transformer_jax.train import compile_cache

# A process that configures the cache as a run does, compiles one program and prints what JAX
# was told.
_PROBE = """
import json, sys
import jax
from transformer_jax.train import compile_cache
path = compile_cache.configure(sys.argv[1])
jax.jit(lambda x: x * 2 + 1)(1.0).block_until_ready()
print(json.dumps({"path": path, "max_size": jax.config.jax_compilation_cache_max_size,
                  "min_time": jax.config.jax_persistent_cache_min_compile_time_secs}))
"""


def _probe(setting, tmp_path, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    clean.pop("JAX_COMPILATION_CACHE_DIR", None)  # the suite's own cache
    clean.update(XDG_CACHE_HOME=str(tmp_path / "home_cache"), JAX_PLATFORMS="cpu", **env)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, setting], env=clean, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _entries(path):
    return [name for name in os.listdir(path) if not name.startswith(".")]


def test_chosen_dir_by_setting(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.chosen_dir("") == str(tmp_path / "transformer_jax" / "xla")
    assert compile_cache.chosen_dir("off") is None
    assert compile_cache.chosen_dir("~/cc") == os.path.expanduser("~/cc")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/somewhere")
    assert compile_cache.chosen_dir("") == "/somewhere"
    assert compile_cache.chosen_dir("/mine") == "/mine" and compile_cache.chosen_dir("off") is None


def test_a_run_compiles_through_the_bounded_user_cache_by_default(tmp_path):
    found = _probe("", tmp_path)
    user = tmp_path / "home_cache" / "transformer_jax" / "xla"
    assert found == {
        "path": str(user),
        "max_size": compile_cache.DEFAULT_MAX_BYTES,
        "min_time": 0.0,  # every program, however fast it compiles
    }
    assert _entries(user)  # the program was written


def test_off_and_a_chosen_directory(tmp_path):
    assert _probe("off", tmp_path)["path"] is None
    assert not (tmp_path / "home_cache").exists()
    mine = tmp_path / "mine"
    found = _probe(str(mine), tmp_path)
    assert found["path"] == str(mine) and found["max_size"] == -1  # unbounded, as JAX keeps it
    assert _entries(mine) and not (tmp_path / "home_cache").exists()


@pytest.mark.parametrize("setting", ["", "off"])
def test_the_environment_wins_over_the_default_and_off_wins_over_it(tmp_path, setting):
    sweep_cache = tmp_path / "sweep_cache"
    found = _probe(setting, tmp_path, JAX_COMPILATION_CACHE_DIR=str(sweep_cache))
    assert found["path"] == (None if setting == "off" else str(sweep_cache))
    assert found["max_size"] == -1  # a sweep's cache is its own directory's, unbounded
    assert bool(sweep_cache.exists() and _entries(sweep_cache)) == (setting == "")
    assert not (tmp_path / "home_cache").exists()
