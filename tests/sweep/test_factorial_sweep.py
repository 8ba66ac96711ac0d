"""End to end: a 2x2 factorial sweep trained by a stand-in trainer (real subprocesses, run
directories and report), its effects checked against hand-computed numbers, and the report
rebuilt from runs.csv alone with --report_only --runs_csv."""

import csv
import math
import os
import shutil
import subprocess
import sys

import pytest
from sweep_fixtures import MACHINE

from transformer_jax.report.report import write_report
from transformer_jax.sweep import load_sweep, run_sweep

# The stand-in trainer: test/seq_accuracy = 0.5 + offset + 0.2 big + 0.5 offset big + 0.01 k seed,
# where big = (d_model == 64) and k = 1, 3, 2, 5 in the four cells, so every effect has a
# known mean and a non-zero spread over seeds.
FACTORIAL_MAIN = """
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
workdir = args["workdir"]
os.makedirs(workdir, exist_ok=True)
seed = int(args["config.seed"])
offset = float(args.get("config.fake.offset", "0.0"))
big = args.get("config.model.d_model", "32") == "64"
k = {(False, False): 1, (True, False): 3, (False, True): 2, (True, True): 5}[(offset > 0, big)]
acc = 0.5 + offset + 0.2 * big + 0.5 * offset * big + 0.01 * k * seed
with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"seed": seed, "config": args["config"], "git_commit": "fake"}, f)
with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for step, loss in ((0, 2.0), (10, 1.0)):
        f.write(json.dumps({"step": step, "split": "train", "time": 0.1, "loss": loss}) + "\\n")
summary = {"status": "finished", "step": 10, "metrics": {"test": {"seq_accuracy": acc}},
           "num_params": 100, "tokens_per_sec": 50.0, "wall_time_s": 0.3, "error": None}
with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f)
"""

SWEEP_FILE = '''
"""A larger learning rate helps more in the larger model (the stand-in's interaction)."""
from transformer_jax.sweep import Factor, Sweep


def get_sweep():
    return Sweep(
        config="configs/fake.py",
        factors=(
            Factor("lr", {"low": {}, "high": {"fake.offset": 0.1}}),
            Factor("size", {"small": {}, "big": {"model.d_model": 64}}),
        ),
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy",),
    )
'''

T_975_2 = 4.302653


def _effects(path):
    with open(path) as f:
        return {(r["effect"], r["held_fixed"]): r for r in csv.DictReader(f)}


def test_2x2_factorial_sweep_end_to_end(project):
    (project / "fake_factorial_main.py").write_text(FACTORIAL_MAIN)
    (project / "experiments" / "lr_size.py").write_text(SWEEP_FILE)
    sweep = load_sweep("experiments/lr_size.py")
    assert list(sweep.variants) == ["low_small", "low_big", "high_small", "high_big"]
    counts = run_sweep(
        sweep,
        "experiments/lr_size.py",
        "out",
        main_module="fake_factorial_main",
        command="python -m transformer_jax.sweep --sweep=experiments/lr_size.py --workdir=out",
        machine=MACHINE,
        seed_groups=False,  # The stand-in trains one seed per process.
    )
    assert counts == {"finished": 12}
    write_report("out")
    # Every cell is an ordinary run with its merged overrides as flags, same seeds everywhere.
    command = (project / "out/high_big/seed_2/command.txt").read_text()
    assert "--config.fake.offset=0.1" in command and "--config.model.d_model=64" in command

    effects = _effects(project / "out" / "effects.csv")
    # lr at size=small, per seed (0.6 + 0.03 s) - (0.5 + 0.01 s) = 0.10, 0.12, 0.14.
    lr_small = effects[("high − low", "size=small")]
    assert float(lr_small["diff"]) == pytest.approx(0.12)
    half = T_975_2 * 0.02 / math.sqrt(3)
    assert float(lr_small["ci_low"]) == pytest.approx(0.12 - half, abs=1e-6)
    # lr at size=big: (0.85 + 0.05 s) - (0.7 + 0.02 s) = 0.15, 0.18, 0.21.
    assert float(effects[("high − low", "size=big")]["diff"]) == pytest.approx(0.18)
    # Interaction, per seed 0.05 + 0.01 s: mean 0.06, sd 0.01.
    inter = effects[("(big − small) at lr=high minus at lr=low", "")]
    assert inter["kind"] == "interaction" and inter["factors"] == "lr x size"
    half = T_975_2 * 0.01 / math.sqrt(3)
    assert float(inter["diff"]) == pytest.approx(0.06)
    assert float(inter["ci_low"]) == pytest.approx(0.06 - half, abs=1e-6)
    assert float(inter["ci_high"]) == pytest.approx(0.06 + half, abs=1e-6)
    # The full grid is balanced: marginal effects, e.g. lr averaged over size = 0.15.
    assert float(effects[("high − low", "averaged over size")]["diff"]) == pytest.approx(0.15)
    # One family of 4 simple + 1 interaction + 2 marginal comparisons, Holm-adjusted.
    assert {r["family_size"] for r in effects.values()} == {"7"}
    assert all(float(r["p_holm"]) >= float(r["p"]) for r in effects.values())

    report = (project / "out" / "report.md").read_text()
    assert "| **low_small** (reference) | low | small | 0.510 ± 0.010 (n=3) |" in report
    assert "lr × size: (big − small) at lr=high minus at lr=low" in report
    assert "family of 7 comparisons" in report
    assert "## Factors" in report and "`lr` (trained)" in report

    tex = (project / "out" / "table.tex").read_text()  # the paper table: the effects
    assert "lr $\\times$ size: (big $-$ small) at lr=high minus at lr=low" in tex
    assert "$+0.060^{*}$" in tex or "$+0.060^{*\\dagger}$" in tex

    # results/ folders hold the report and runs.csv, no run directories: rebuild from those.
    copy = project / "committed"
    copy.mkdir()
    for name in ("sweep.json", "runs.csv", "curves_train_loss.png"):
        shutil.copy(project / "out" / name, copy / name)
    cmd = [sys.executable, "-m", "transformer_jax.sweep", "--workdir=committed"]
    cmd += ["--report_only", "--runs_csv=committed/runs.csv"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert done.returncode == 0, done.stderr
    assert (copy / "effects.csv").read_text() == (project / "out" / "effects.csv").read_text()
    assert (copy / "runs.csv").read_text() == (project / "out" / "runs.csv").read_text()
    rebuilt = (copy / "report.md").read_text()
    assert "rebuilt from `runs.csv` without the run directories" in rebuilt
    assert "](curves_train_loss.png)" in rebuilt  # kept: it cannot be redrawn without the runs
    assert "curves_test_seq_accuracy.png" not in rebuilt

    bad = [sys.executable, "-m", "transformer_jax.sweep", "--workdir=out", "--runs_csv=x.csv"]
    done = subprocess.run(bad, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert done.returncode != 0 and "--runs_csv only works with --report_only" in done.stderr
