"""The persistent XLA compilation cache a run compiles through, on by default.

On a CPU a small run spends more time compiling than training (the quick reverse run: 4.4 s of
train-step compile, and most of its evaluation and decoding time, against 5.1 s of training),
and a rerun, a resume or the next run of the same model compiles the same programs again. JAX
can keep compiled programs on disk, keyed by the program, its compile options, the jax/jaxlib
versions and the device, so a cached program is the one the compiler would have built: results
do not depend on the cache.

`train.compilation_cache_dir` chooses it: "" is the user's cache (`default_dir()`, bounded at
DEFAULT_MAX_BYTES, least recently used programs evicted first), "off" none, any other value
that directory (unbounded, as JAX keeps it). A JAX_COMPILATION_CACHE_DIR set in the environment
(a sweep's `DIR/.compile_cache`, transformer_jax/sweep/runner.py; the test suite's) wins over
the default. Every program is cached, however fast it compiled (JAX's default keeps only those
over a second: on a CPU most are under), unless JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS says
otherwise.
"""

import importlib.util
import os

import jax

OFF = "off"
DEFAULT_MAX_BYTES = 2**30  # the user cache's bound: a few hundred small models' programs
_ENV_DIR = "JAX_COMPILATION_CACHE_DIR"
_ENV_MIN_TIME = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def default_dir() -> str:
    """The user's cache: $XDG_CACHE_HOME/transformer_jax/xla, else ~/.cache/transformer_jax/xla."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "transformer_jax", "xla")


def chosen_dir(setting: str) -> str | None:
    """The directory `setting` (train.compilation_cache_dir) compiles through, None when off."""
    if setting == OFF:
        return None
    if setting:
        return os.path.expanduser(setting)
    return os.environ.get(_ENV_DIR) or default_dir()


def configure(setting: str) -> str | None:
    """Points JAX's persistent compilation cache at `chosen_dir(setting)` (or turns it off);
    returns the directory. Call before anything compiles: JAX opens its cache on the first
    compile."""
    path = chosen_dir(setting)
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    # JAX's eviction needs filelock (requirements.txt); without it the cache is unbounded.
    if not setting and not os.environ.get(_ENV_DIR) and importlib.util.find_spec("filelock"):
        jax.config.update("jax_compilation_cache_max_size", DEFAULT_MAX_BYTES)
    if _ENV_MIN_TIME not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path
