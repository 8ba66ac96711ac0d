"""One tuned cell the way sweeps trained it before run groups and as one run group, side by side.

  python -m benchmarks.grid_speed                      # 6 rates x 3 seeds of the ablation model
  python -m benchmarks.grid_speed --rates=1e-3,2e-3 --seeds=0,1 --set=train.steps=4

A tuned sweep trains every cell at each point of its learning-rate grid, on every seed
(docs/tuning.md). This runs one cell's grid twice from scratch, one way after the other, in
fresh directories, each without a compilation cache:

  per_rate   one process per rate, its seeds a seed group (`main --seeds`): how tuned sweeps
             ran it before run groups, each rate compiling, initialising and evaluating itself;
  one_group  one process for the whole grid, the rates traced per run (`main --runs`,
             train/seed_group.py): one compile, one initialisation program, one vmapped
             evaluation per batch.

It prints each way's wall time and its phase times summed over its processes (train/timing.py,
from the runs' summary.json: a group's breakdown is its process's, shared by its runs), the
largest relative difference of a run's final metric between the two ways (rounding, with the
config's optimizer: Adam amplifies it as runs on two machines do), the same for the validation
loss a tuned cell chooses on, the rate each way's runs would choose, and `ratio: X` (per_rate wall
time / one_group wall time). Run it on an otherwise idle machine: the two are measured one after
the other, so load that changes in between changes the ratio.
"""

import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

from transformer_jax import environment
from transformer_jax.commands import parse_flags
from transformer_jax.sweep import selection
from transformer_jax.train.timing import PHASES

FLAGS = flags.FLAGS
SELECT_ON = "validation/loss"  # what a tuned sweep chooses a cell's rate on (docs/tuning.md)


def define_flags() -> None:
    """Defined only when run as a program: importing this module (its tests) defines nothing
    that could clash with other commands' flags."""
    flags.DEFINE_string("config", "configs/ablation.py:reverse,quick", "The cell's config.")
    flags.DEFINE_list(
        "rates", ["5e-4", "1e-3", "2e-3", "4e-3", "8e-3", "1.6e-2"], "train.learning_rate grid."
    )
    flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds of every rate.")
    flags.DEFINE_list("set", [], "Config overrides of every run, key=value (no --config.).")
    flags.DEFINE_string("keep", "", "Keep the two grids' directories under this directory.")


MODES = ("per_rate", "one_group")


def run_dir(rate: str, seed: int) -> str:
    """A run's directory under a way's root, as a tuned sweep names it (sweep/nuisance.py)."""
    return f"learning_rate-{float(rate)!r}/seed_{seed}"


def commands(
    mode: str, root: Path, config: str, rates: list[str], seeds: list[int], overrides: list[str]
) -> list[list[str]]:
    """The trainer processes of one way of training the grid."""
    base = [sys.executable, "-m", "transformer_jax.main", f"--config={config}"]
    base += [f"--config.{item}" for item in overrides]
    if mode == "per_rate":
        return [
            [
                *base,
                f"--workdir={root / Path(run_dir(rate, 0)).parent}",
                f"--seeds={','.join(map(str, seeds))}",
                f"--config.train.learning_rate={rate}",
            ]
            for rate in rates
        ]
    runs = {
        run_dir(rate, seed): {"seed": seed, "train.learning_rate": float(rate)}
        for rate in rates
        for seed in seeds
    }
    return [[*base, f"--workdir={root}", f"--runs={json.dumps(runs)}"]]


def run_mode(mode: str, root: Path) -> float:
    """Trains the grid one way in root/mode; returns its wall time in seconds."""
    seeds = [int(s) for s in FLAGS.seeds]
    start = time.perf_counter()
    for argv in commands(mode, root / mode, FLAGS.config, FLAGS.rates, seeds, FLAGS.set):
        print(f"{mode}: {' '.join(argv[3:])}", flush=True)
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def summaries(workdir: Path) -> dict[str, dict]:
    """Run directory (relative) -> its summary.json."""
    return {
        str(path.parent.relative_to(workdir)): json.loads(path.read_text())
        for path in sorted(workdir.glob("*/seed_*/summary.json"))
    }


def phase_sums(runs: dict[str, dict], mode: str) -> dict[str, float]:
    """Each phase summed over the processes of one way (the runs of a process share its
    breakdown: counted once, per rate or for the whole grid)."""
    processes = {}
    for name, summary in runs.items():
        process = name.partition("/")[0] if mode == "per_rate" else ""
        processes[process] = summary.get("timing") or {}
    out = {"processes": len(processes)}
    for phase in (*PHASES, "total"):
        out[phase] = sum((timing.get(phase) or 0.0) for timing in processes.values())
    return out


def largest_difference(
    old: dict[str, dict], new: dict[str, dict], only: str | None = None
) -> tuple[str, float]:
    """(run/split/metric, relative difference) of the final metric that differs most, among
    every metric or `only` ("split/metric")."""
    worst, label = 0.0, "none compared"
    for name in sorted(old.keys() & new.keys()):
        for split, metrics in old[name].get("metrics", {}).items():
            for metric, value in metrics.items():
                if only not in (None, f"{split}/{metric}"):
                    continue
                other = new[name].get("metrics", {}).get(split, {}).get(metric)
                if other is None:
                    continue
                difference = abs(value - other) / max(abs(value), 1e-12)
                if difference >= worst:
                    worst, label = difference, f"{name} {split}/{metric}"
    return label, worst


def chosen_rate(runs: dict[str, dict]) -> str:
    """The rate directory a tuned cell chooses from these runs: the best mean SELECT_ON over
    the seeds (transformer_jax/sweep/selection.py, select_per="cell"); "none" until every run
    has it."""
    split, metric = SELECT_ON.split("/")
    scores = collections.defaultdict(dict)
    for name, summary in runs.items():
        rate, _, seed = name.partition("/")
        scores[rate][seed] = summary.get("metrics", {}).get(split, {}).get(metric)
    seeds = sorted({seed for by_seed in scores.values() for seed in by_seed})
    chosen = selection.choose(scores, seeds, mode="min", per="cell")
    return next(iter(chosen.values()), "none")


def main(argv):
    del argv
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(FLAGS.keep or scratch)
        walls = {mode: run_mode(mode, root) for mode in MODES}
        runs = {mode: summaries(root / mode) for mode in MODES}
        machine = environment.describe_machine(environment.machine_info())
        grid = f"{len(FLAGS.rates)} rates x {len(FLAGS.seeds)} seeds"
        print(f"\none cell of {FLAGS.config} ({grid}) on {machine}")
        header = f"{'mode':<9} {'wall_s':>7} {'runs':>4} {'procs':>5} "
        print(header + " ".join(f"{p:>10}" for p in (*PHASES, "total")))
        for mode in MODES:
            sums = phase_sums(runs[mode], mode)
            cells = " ".join(f"{sums[p]:>10.1f}" for p in (*PHASES, "total"))
            print(
                f"{mode:<9} {walls[mode]:>7.1f} {len(runs[mode]):>4} {sums['processes']:>5} {cells}"
            )
        print("(phases: seconds summed over the processes; a group's runs share theirs)")
        label, worst = largest_difference(runs["per_rate"], runs["one_group"])
        print(f"largest relative difference of a final metric: {worst:.2e} ({label})")
        label, worst = largest_difference(runs["per_rate"], runs["one_group"], SELECT_ON)
        print(f"largest relative difference of {SELECT_ON}: {worst:.2e} ({label})")
        chosen = {mode: chosen_rate(runs[mode]) for mode in MODES}
        print(
            f"chosen on the mean {SELECT_ON}: " + ", ".join(f"{m} {r}" for m, r in chosen.items())
        )
        print(f"ratio: {walls['per_rate'] / walls['one_group']:.2f}")


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=parse_flags("grid_speed"))
