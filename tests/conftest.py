"""Shared test setup: strict rank promotion catches silent broadcasting bugs; the trainer's
malloc settings (transformer_jax/train/host_memory.py), set before JAX starts its threads;
unoptimised XLA:CPU code generation by its older emitters; and one persistent compilation cache
for the session and the processes its tests start.

Many tests train the same tiny models (tests/train/train_fixtures.py), and on XLA:CPU compiling
them costs more than training them, so the session compiles each program once, as the runs of a
sweep do (transformer_jax/sweep/runner.py). A JAX_COMPILATION_CACHE_DIR already set wins; the
cache made here is deleted at the end of the session, so no run of the suite reads another's.
"""

import os
import shutil
import subprocess
import sys
import tempfile

# The suite runs on the CPU (several devices are simulated where a test needs them). With libtpu
# installed (requirements-tpu.txt, for the ahead-of-time TPU tests) JAX would otherwise probe for
# a TPU in this process and every one it starts, printing libtpu's warnings into the stderr that
# tests read; the AOT tests still get their TPU topologies with the CPU as the platform.
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _xla_accepts(flag: str) -> bool:
    """Whether this jaxlib's XLA knows `flag`: an unknown flag in XLA_FLAGS aborts the process
    that starts XLA, so a child process tries it (about a second, once per session)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import jax; jax.devices()"],
        env={**os.environ, "XLA_FLAGS": flag},
        capture_output=True,
    )
    return probe.returncode == 0


# The suite's programs are tiny and mostly compiled, not run, and compiling dominates the
# model and trainer tests. XLA:CPU runs LLVM's optimisations over every program it compiles,
# op-by-op ones included: unoptimised code generation saves about a quarter of their time. Its
# newer fusion emitters lower each fusion through MLIR, which costs more to compile than the
# older emitters' direct LLVM IR (about 30% of a tiny train step's compile; two compile-heavy
# test files 9-18% faster, A/B alternating); the jaxlibs that accept the flag still have them.
# Both keep IEEE semantics (no fast math), and the processes the tests start inherit them (a
# test that sets device counts adds to these flags). XLA_FLAGS that already choose a level win.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    _FLAGS = ["--xla_backend_optimization_level=0"]
    if _xla_accepts("--xla_cpu_use_fusion_emitters=false"):
        _FLAGS.append("--xla_cpu_use_fusion_emitters=false")
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *_FLAGS]).strip()

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # Read by JAX when it is imported.
    _CACHE = tempfile.mkdtemp(prefix="transformer_jax_tests_compile_cache_")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
else:
    _CACHE = None

import jax  # noqa: E402

from transformer_jax.train import host_memory  # noqa: E402

host_memory.reuse_freed_memory()
# Strict rank promotion for every thread: a context manager would reach only the one it is
# entered on, and the trainer compiles its evaluations on another (train/compile_ahead.py).
jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_sessionfinish(session, exitstatus):
    if _CACHE is not None:
        shutil.rmtree(_CACHE, ignore_errors=True)
