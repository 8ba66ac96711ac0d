"""What a sweep costs the old way and the new way, side by side on one machine.

  python -m benchmarks.sweep_speed                      # the README's quick-start sweep
  python -m benchmarks.sweep_speed --sweep=experiments/heads.py --quick

Runs the sweep twice from scratch, one after the other, in fresh directories:

  per_run  one process per (variant, seed), each compiling everything itself
           (--seed_groups=false --compile_cache=false): how sweeps ran before seed groups;
  grouped  the README's quick start: the seeds of a variant as one process and one vmapped
           program (train/seed_group.py), sharing a persistent compilation cache
           (sweep/runner.py), --parallel processes at once (default 2, one per core of a
           2-core machine: XLA compiles on one thread, and a small model's step barely
           uses two).

and prints each one's wall time, the mean per-run time breakdown from the runs' summary.json
(train/timing.py; a seed group's breakdown is its process's, shared by its seeds), the largest
difference between the two reports' per-variant means, and `ratio: X` (per_run wall time /
grouped wall time). Run it on an otherwise idle machine: the two are measured one after the
other, so load that changes in between changes the ratio.
"""

import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

from transformer_jax import environment
from transformer_jax.commands import parse_flags

_SWEEP = flags.DEFINE_string("sweep", "experiments/quickstart.py", "Sweep file to run.")
_QUICK = flags.DEFINE_bool("quick", False, "Pass --quick to the sweep (shrunk runs).")
_VARIANTS = flags.DEFINE_list("variants", [], "Only these variants of the sweep (default: all).")
_KEEP = flags.DEFINE_string("keep", "", "Keep the two sweep directories under this directory.")
_PARALLEL = flags.DEFINE_integer("parallel", 2, "--parallel of the grouped sweep.")

MODES = {
    "per_run": lambda: ("--seed_groups=false", "--compile_cache=false"),
    "grouped": lambda: (f"--parallel={_PARALLEL.value}",),
}
PHASES = ("startup", "data", "init", "compile", "train", "eval", "decode", "checkpoint", "total")


def run_mode(name: str, root: Path) -> float:
    """Runs the sweep in root/name; returns its wall time in seconds."""
    argv = [
        sys.executable,
        "-m",
        "transformer_jax.sweep",
        f"--sweep={_SWEEP.value}",
        f"--workdir={root / name}",
        *(["--quick"] if _QUICK.value else []),
        *([f"--variants={','.join(_VARIANTS.value)}"] if _VARIANTS.value else []),
        *MODES[name](),
    ]
    print(f"{name}: {' '.join(argv[1:])}", flush=True)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def mean_breakdown(workdir: Path, grouped: bool) -> tuple[int, dict[str, float]]:
    """The number of finished runs and their mean time per process and phase (the seeds of a
    group share their process's breakdown: counted once, by variant directory)."""
    summaries = list(workdir.glob("*/seed_*/summary.json"))
    processes = {}
    for summary in summaries:
        timing = json.loads(summary.read_text()).get("timing") or {}
        if timing:
            processes[summary.parent.parent if grouped else summary] = timing
    runs = len(summaries)
    means = {
        phase: sum((t.get(phase) or 0.0) for t in processes.values()) / max(len(processes), 1)
        for phase in PHASES
    }
    return runs, {"processes": len(processes), **means}


def variant_means(workdir: Path) -> dict[tuple[str, str], float]:
    """(variant, metric) -> mean over seeds, from the report's runs.csv."""
    with open(workdir / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    skip = {"variant", "seed", "status", "step", "num_params", "git_commit", "error"}
    skip |= {"tokens_per_sec", "wall_time_s"}
    sums: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        for metric, value in row.items():
            if metric not in skip and value not in ("", None):
                sums.setdefault((row["variant"], metric), []).append(float(value))
    return {key: sum(v) / len(v) for key, v in sums.items()}


def main(argv):
    del argv
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(_KEEP.value or scratch)
        walls = {name: run_mode(name, root) for name in MODES}
        machine = environment.describe_machine(environment.machine_info())
        print(f"\nsweep {_SWEEP.value}{' --quick' if _QUICK.value else ''} on {machine}")
        print(
            f"{'mode':<8} {'wall_s':>7} {'runs':>4} {'procs':>5} "
            + " ".join(f"{p:>9}" for p in PHASES)
        )
        for name, wall in walls.items():
            runs, means = mean_breakdown(root / name, grouped=name == "grouped")
            cells = " ".join(f"{means[p]:>9.1f}" for p in PHASES)
            print(f"{name:<8} {wall:>7.1f} {runs:>4} {means['processes']:>5} {cells}")
        print("(phases: mean seconds per process; a seed group is one process for its seeds)")
        old, new = (variant_means(root / name) for name in MODES)
        common = sorted(old.keys() & new.keys())
        worst = max(common, key=lambda k: abs(old[k] - new[k]))
        print(
            f"largest difference of a per-variant mean: {worst[0]} {worst[1]} "
            f"{old[worst]:.4g} vs {new[worst]:.4g} ({len(common)} compared)"
        )
        print(f"ratio: {walls['per_run'] / walls['grouped']:.2f}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("sweep_speed"))
