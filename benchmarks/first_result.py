"""How long one small run takes to its first result, before and after the fixed costs were cut.

  python -m benchmarks.first_result                  # the quick reverse run, 3 rounds
  python -m benchmarks.first_result --config=configs/algorithmic.py:copy,quick --rounds=5

Each round runs the command three ways in turn, each in a fresh run directory:

  before  no persistent compilation cache, evaluations compiled when first used
          (--config.train.compilation_cache_dir=off --config.train.compile_ahead=false);
  cold    the defaults (train/compile_cache.py, train/compile_ahead.py) with an empty cache:
          a first run on a new machine;
  warm    the defaults again, over the cache the cold run just filled: a rerun.

It prints each way's median wall time (the whole process, as the user waits for it) and median
phase times from the runs' summary.json (train/timing.py), the fixed costs (everything but
"train") against the training time, and the ratios cold/before and warm/cold. Alternating the
ways round by round keeps a drift of the machine's speed out of the ratios; run it on an
otherwise idle machine all the same.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

from transformer_jax import environment
from transformer_jax.commands import parse_flags

_CONFIG = flags.DEFINE_string(
    "config", "configs/algorithmic.py:reverse,quick", "The run's --config."
)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds of (before, cold, warm).")

WAYS = {
    "before": (
        "--config.train.compilation_cache_dir=off",
        "--config.train.compile_ahead=false",
    ),
    "cold": (),
    "warm": (),
}
PHASES = ("startup", "data", "init", "compile", "train", "eval", "decode", "checkpoint", "total")


def run_once(workdir: Path, cache_home: Path, way: str) -> tuple[float, dict[str, float]]:
    """One run in `workdir`, its default cache under `cache_home`: (wall s, phase times)."""
    argv = [
        sys.executable,
        "-m",
        "transformer_jax.main",
        f"--config={_CONFIG.value}",
        f"--workdir={workdir}",
        *WAYS[way],
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the run's own default, not an inherited one
    env["XDG_CACHE_HOME"] = str(cache_home)
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    timing = json.loads((workdir / "summary.json").read_text())["timing"]
    return wall, timing


def main(argv):
    del argv
    found = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for round_ in range(_ROUNDS.value):
            cache_home = root / f"cache_{round_}"  # empty for this round's cold run
            for way in WAYS:
                found[way].append(run_once(root / f"{way}_{round_}", cache_home, way))
                print(f"round {round_} {way}: {found[way][-1][0]:.1f} s", flush=True)
    machine = environment.describe_machine(environment.machine_info())
    print(f"\n{_CONFIG.value}, {_ROUNDS.value} rounds, on {machine}")
    print(f"{'way':<7} {'wall_s':>7} " + " ".join(f"{p:>10}" for p in PHASES) + "  fixed/train")
    walls = {}
    for way, rows in found.items():
        walls[way] = statistics.median(wall for wall, _ in rows)
        phases = {p: statistics.median(t.get(p, 0.0) for _, t in rows) for p in PHASES}
        fixed = statistics.median(w - t["train"] for w, t in rows)
        train = phases["train"]
        cells = " ".join(f"{phases[p]:>10.1f}" for p in PHASES)
        print(f"{way:<7} {walls[way]:>7.1f} {cells}  {fixed:.1f}/{train:.1f} s")
    print("(medians over rounds, seconds; fixed: the wall time less training)")
    print(f"ratio cold/before: {walls['cold'] / walls['before']:.2f}")
    print(f"ratio warm/cold: {walls['warm'] / walls['cold']:.2f}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("first_result"))
