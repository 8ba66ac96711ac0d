"""Grids that contain their optimum (sweep/grid_edges.py): an edge cell is extended on the
selection seeds, an interior one is not, a diverging edge stops the extension, and the record
survives a kill and --report_only."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from kill_at_file import kill_when_file_appears
from test_nuisance_sweep import FAKE_CONFIG, MACHINE, tuned_sweep

from transformer_jax.report.report import write_report
from transformer_jax.sweep import grid_edges, run_sweep
from transformer_jax.sweep.nuisance import GridExtension
from transformer_jax.sweep_cli import tensorboard_events

# Validation loss |log10(lr / best)|; a rate above `diverge` diverges; FAKE_BLOCK_LR blocks.
FAKE_MAIN = """
import json, math, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
best = float(args.get("config.fake.best_lr", "0.001"))
diverge = float(args.get("config.fake.offset", "0.0")) or math.inf


def train(workdir, seed, lr):
    if os.environ.get("FAKE_BLOCK_LR") and lr == float(os.environ["FAKE_BLOCK_LR"]):
        open(os.environ["FAKE_BLOCK_FILE"], "w").close()
        time.sleep(600)  # killed by the test
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump({"seed": seed, "git_commit": "fake"}, f)
    loss = abs(math.log10(lr / best)) + 0.001 * seed
    status = "diverged" if lr > diverge else "finished"
    metrics = {} if status == "diverged" else {"validation": {"loss": loss},
                                               "test": {"seq_accuracy": 1 - loss}}
    summary = {"status": status, "step": 10, "metrics": metrics, "num_params": 100,
               "tokens_per_sec": 50.0, "wall_time_s": 0.1, "error": None}
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f)


lr = float(args.get("config.train.learning_rate", "0.001"))
if "runs" in args:
    for name, run in json.loads(args["runs"]).items():
        train(os.path.join(args["workdir"], name), run["seed"], run.get("train.learning_rate", lr))
elif "seeds" in args:
    for seed in (int(s) for s in args["seeds"].split(",")):
        train(os.path.join(args["workdir"], f"seed_{seed}"), seed, lr)
else:
    train(args["workdir"], int(args["config.seed"]), lr)
"""


@pytest.fixture
def project(project):
    (project / "configs" / "fake.py").write_text(FAKE_CONFIG)
    (project / "fake_main.py").write_text(FAKE_MAIN)
    return project


def edge_sweep(**shifted):
    """base is best at 1e-3, inside the grid; shifted at 1e-1, beyond its upper edge 1e-2."""
    return tuned_sweep(
        variants={"base": {}, "shifted": {"fake.best_lr": 1e-1, **shifted}},
        nuisance={"train.learning_rate": (1e-4, 1e-3, 1e-2)},
        grid_extension=GridExtension(max_rounds=3, margin=0.05),
    )


def _rates(workdir, variant):
    return sorted(float(p.name.partition("-")[2]) for p in (workdir / variant).glob("learn*"))


def test_an_edge_cell_is_extended_and_an_interior_one_not(project):
    workdir = project / "runs"
    run_sweep(
        edge_sweep(), "experiments/e.py", str(workdir), main_module="fake_main", machine=MACHINE
    )
    assert _rates(workdir, "base") == [1e-4, 1e-3, 1e-2]
    # 1e-2 -> 0.1 (the best: its neighbour 1e-2 is worse by 1 > 0.05) -> 1.0, worse: interior.
    assert _rates(workdir, "shifted") == [1e-4, 1e-3, 1e-2, 0.1, 1.0]
    entries = grid_edges.read_record(str(workdir))
    assert [(e["variant"], e["round"], e["values"]) for e in entries] == [
        ("shifted", 1, [0.1]),
        ("shifted", 2, [1.0]),
    ]
    write_report(str(workdir))
    text = (workdir / "selection.csv").read_text()
    assert "shifted,0,learning_rate-0.1," in text
    assert "Still on an edge" not in (workdir / "report.md").read_text()

    # Its record alone (a committed folder) unpacks with the extensions' runs among the rest.
    copy = project / "committed"
    copy.mkdir()
    for path in workdir.iterdir():
        if path.is_file():
            shutil.copy(path, copy / path.name)
    message = tensorboard_events(str(copy))
    assert message.startswith("16 runs unpacked"), message
    assert (copy / "shifted" / "learning_rate-1.0" / "seed_1" / "hparams.json").is_file()


def test_a_diverging_edge_stops_the_extension(project):
    """Past 0.05 every seed diverges: the extension to 0.1 is tried once, then 1e-2 stays
    best with a (diverged) outer neighbour, a real edge."""
    workdir = project / "runs"
    run_sweep(
        edge_sweep(**{"fake.offset": 0.05}),
        "experiments/e.py",
        str(workdir),
        main_module="fake_main",
        machine=MACHINE,
    )
    assert _rates(workdir, "shifted") == [1e-4, 1e-3, 1e-2, 0.1]
    assert len(grid_edges.read_record(str(workdir))) == 1


@pytest.mark.slow  # three sweep processes (~20 s on two loaded cores)
def test_the_record_survives_a_kill_and_report_only(project):
    (project / "experiments" / "e.py").write_text(
        "from test_grid_edges import edge_sweep\n\n\ndef get_sweep():\n    return edge_sweep()\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.environ["PYTHONPATH"], os.path.dirname(__file__)]),
    }
    command = [
        sys.executable,
        "-m",
        "transformer_jax.sweep",
        "--sweep=experiments/e.py",
        "--workdir=runs",
        "--main_module=fake_main",
        "--allow_dirty",
    ]
    block = project / "blocked"
    block_env = {**env, "FAKE_BLOCK_LR": "1.0", "FAKE_BLOCK_FILE": str(block)}
    kill_when_file_appears(command, block_env, block, timeout_s=120)
    record = json.loads((project / "runs" / grid_edges.RECORD_FILE).read_text())
    assert [e["values"] for e in record["extensions"]] == [[0.1], [1.0]]
    subprocess.run(
        [*command[:3], "--workdir=runs", "--report_only"], env=env, check=True, capture_output=True
    )
    assert (
        "| shifted | 2 | extend | `train.learning_rate` | 1.0 |"
        in (project / "runs" / "report.md").read_text()
    )
    subprocess.run(command, env=env, check=True, capture_output=True)
    assert _rates(project / "runs", "shifted") == [1e-4, 1e-3, 1e-2, 0.1, 1.0]
    assert len(grid_edges.read_record(str(project / "runs"))) == 2
