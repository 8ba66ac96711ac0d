"""Nuisance factors end to end: every variant at every learning rate, the best chosen on
validation, the report tuned and untuned, rebuilt from runs.csv alone.

The stand-in trainer scores a run by how far its learning rate is from the variant's own best
one (fake.best_lr): "base" is best at the shared default 1e-3, "shifted" at 1e-2. At the default,
shifted therefore looks worse than base; tuned, it is better, so the verdict must change.
"""

import csv
import json
import shutil

import pytest

from transformer_jax.report.report import write_report
from transformer_jax.sweep import Factor, SplitFactor, Sweep, run_sweep

FAKE_MAIN = """
import json, math, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
best = float(args.get("config.fake.best_lr", "0.001"))
offset = float(args.get("config.fake.offset", "0.0"))


def train(workdir, seed, lr=float(args.get("config.train.learning_rate", "0.001"))):
    miss = abs(math.log10(lr / best))
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump({"seed": seed, "git_commit": "fake"}, f)
    metrics = {
        "validation": {"loss": 1.0 + miss + 0.01 * seed},
        "test": {"seq_accuracy": 0.8 - 0.1 * miss + offset + 0.01 * seed},
        "test_long": {"seq_accuracy": 0.4 - 0.1 * miss + 2 * offset + 0.01 * seed},
    }
    summary = {"status": "finished", "step": 10, "metrics": metrics, "num_params": 100,
               "tokens_per_sec": 50.0, "wall_time_s": 0.3, "error": None}
    # Whole or absent, as the trainer writes it: the job-launcher test polls while jobs run.
    with open(os.path.join(workdir, "summary.json.tmp"), "w") as f:
        json.dump(summary, f)
    os.replace(os.path.join(workdir, "summary.json.tmp"), os.path.join(workdir, "summary.json"))


if "runs" in args:  # a run group: each run's own seed and learning rate
    for name, run in json.loads(args["runs"]).items():
        rate = run.get("train.learning_rate", float(args.get("config.train.learning_rate", 1e-3)))
        train(os.path.join(args["workdir"], name), run["seed"], rate)
elif "seeds" in args:
    for seed in (int(s) for s in args["seeds"].split(",")):
        train(os.path.join(args["workdir"], f"seed_{seed}"), seed)
else:
    train(args["workdir"], int(args["config.seed"]))
"""

FAKE_CONFIG = """
import ml_collections


def get_config(arg=""):
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.fake = ml_collections.ConfigDict({"best_lr": 1e-3, "offset": 0.0})
    config.train = ml_collections.ConfigDict({"learning_rate": 1e-3, "warmup_steps": 0})
    if arg == "quick":  # A shrunk run may change a nuisance key's value, as defaults.shrink does.
        config.train.learning_rate = 5e-4
    return config
"""

MACHINE = {"platform": "cpu", "device_kind": "cpu", "device_count": 1, "cpu_count": 2}


@pytest.fixture
def project(project):
    """The sweep tests' project (conftest.py) with this file's trainer and config."""
    (project / "configs" / "fake.py").write_text(FAKE_CONFIG)
    (project / "fake_main.py").write_text(FAKE_MAIN)
    return project


def tuned_sweep(**changes) -> Sweep:
    kwargs = dict(
        config="configs/fake.py",
        variants={"base": {}, "shifted": {"fake.best_lr": 1e-2, "fake.offset": 0.05}},
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
        baseline="base",
        description="Shifted wants a larger learning rate.",
        nuisance={"train.learning_rate": (1e-3, 1e-2)},
        select_on="validation/loss",
        select_mode="min",
    )
    kwargs.update(changes)
    return Sweep(**kwargs)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def section(report_path, title):
    with open(report_path) as f:
        text = f.read()
    start = text.index(f"## {title}")
    return text[start : text.index("\n## ", start + 1)]


def test_two_cells_two_learning_rates_two_seeds(project):
    workdir = project / "runs"
    counts = run_sweep(
        tuned_sweep(),
        "experiments/tuned.py",
        str(workdir),
        main_module="fake_main",
        machine=MACHINE,
    )
    assert counts == {"finished": 8}
    write_report(str(workdir))
    # Each setting its own directory (and seed group) below its variant's.
    for variant in ("base", "shifted"):
        for lr in ("0.001", "0.01"):
            for seed in (0, 1):
                assert (workdir / variant / f"learning_rate-{lr}" / f"seed_{seed}").is_dir()

    selection = {(r["variant"], r["seed"]): r for r in read_csv(workdir / "selection.csv")}
    assert {k: r["train.learning_rate"] for k, r in selection.items()} == {
        ("base", "0"): "0.001",
        ("base", "1"): "0.001",
        ("shifted", "0"): "0.01",
        ("shifted", "1"): "0.01",
    }
    # results.csv is tuned: shifted at 1e-2 scores 0.8 + 0.05 (+ 0.01 * seed).
    results = {r["variant"]: r for r in read_csv(workdir / "results.csv")}
    assert float(results["shifted"]["test/seq_accuracy:mean"]) == pytest.approx(0.855)
    assert float(results["shifted"]["test/seq_accuracy:diff"]) == pytest.approx(0.05)

    report = workdir / "report.md"
    tuning_text = section(report, "Tuning")
    rows = [line for line in tuning_text.splitlines() if line.startswith("| shifted")]
    # Chosen value, edge flag (1e-2 is the grid's end), the runner-up 1e-3 with its validation
    # loss 1 + 1 (+ 0.01 * seed) beside the best's 1.005, both with std 0.007 over the seeds (no
    # near tie), untuned 0.8 - 0.1 + 0.05, tuned 0.855.
    assert rows[0].rstrip(" |").split(" | ")[1:7] == [
        "learning_rate=0.01",
        "⚠ learning_rate",
        "learning_rate=0.001",
        "1.005 / 2.005 (0.007071)",
        "0.755 ± 0.007 (n=2)",
        "0.855 ± 0.007 (n=2)",
    ]
    assert "chosen on split `validation` by `validation/loss`" in tuning_text
    assert "select_per=cell" in tuning_text
    verdicts = [line for line in tuning_text.splitlines() if "shifted − base" in line]
    assert len(verdicts) == 1 and "**changed** (− → +)" in verdicts[0]
    assert (workdir / "isolation_variant.png").is_file()
    assert "![Isolation plot of variant" in section(report, "Plots")

    # The committed form: sweep.json and runs.csv, no run directories.
    committed = project / "committed"
    committed.mkdir()
    for name in ("sweep.json", "runs.csv"):
        shutil.copy(workdir / name, committed / name)
    rebuilt = write_report(str(committed), runs_csv=str(committed / "runs.csv"))
    assert section(rebuilt, "Tuning") == tuning_text
    assert read_csv(committed / "selection.csv") == read_csv(workdir / "selection.csv")
    assert (committed / "isolation_variant.png").is_file()


def test_status_and_groups_cover_every_setting(project):
    from transformer_jax.sweep import slurm

    workdir = project / "runs"
    run_sweep(
        tuned_sweep(),
        "experiments/tuned.py",
        str(workdir),
        main_module="fake_main",
        machine=MACHINE,
    )
    names = [s.name for s in slurm.sweep_status(str(workdir))]
    assert names == [
        f"{v}/learning_rate-{lr}/seed_{s}"
        for v in ("base", "shifted")
        for lr in ("0.001", "0.01")
        for s in (0, 1)
    ]
    # One process per cell trained both settings and both seeds: the run group's command,
    # then the run's own, which resumes it alone.
    with open(workdir / "shifted" / "learning_rate-0.01" / "seed_0" / "command.txt") as f:
        lines = f.read().splitlines()
    assert "# trained in the run group shifted/{4 runs} by:" in lines
    group = next(line for line in lines if "--runs=" in line)
    assert f"--workdir={workdir / 'shifted'}" in group
    assert "learning_rate-0.01/seed_0" in group and "--seeds" not in group
    own = "--config.seed=0 --config.fake.best_lr=0.01 --config.fake.offset=0.05"
    assert lines[-1].endswith(f"{own} --config.train.learning_rate=0.01")


def test_the_runs_of_a_cell_train_alone_without_groups(project):
    from transformer_jax.sweep import slurm

    workdir = project / "runs"
    sweep = tuned_sweep()
    run_sweep(
        sweep, "experiments/tuned.py", str(workdir), main_module="fake_main", seed_groups=False
    )
    assert [s.state for s in slurm.sweep_status(str(workdir))] == ["finished"] * 8
    with open(workdir / "shifted" / "learning_rate-0.01" / "seed_0" / "command.txt") as f:
        text = f.read()
    assert "group" not in text and "--runs" not in text


def test_default_outside_the_grid_is_refused_before_anything_runs(project):
    sweep = tuned_sweep(nuisance={"train.learning_rate": (3e-3, 1e-2)})
    with pytest.raises(ValueError, match="lacks the base config's value 0.001"):
        run_sweep(sweep, "experiments/tuned.py", str(project / "runs"), main_module="fake_main")
    assert not (project / "runs").exists()


def test_a_factorial_sweep_tuned_has_an_isolation_plot_per_factor(project):
    """Two trained factors and a split factor: every effect's verdict, one plot per factor."""
    sweep = tuned_sweep(
        variants={},
        factors=(
            Factor("shift", {"no": {}, "yes": {"fake.best_lr": 1e-2, "fake.offset": 0.05}}),
            Factor("size", {"small": {}, "large": {"fake.offset": 0.0}}),
            SplitFactor("length", {"seen": "test", "unseen": "test_long"}),
        ),
        cells=[{}, {"shift": "yes"}, {"size": "large"}],
        baseline="",
        metrics=("test/seq_accuracy", "test_long/seq_accuracy"),
    )
    workdir = project / "runs"
    run_sweep(sweep, "experiments/tuned.py", str(workdir), main_module="fake_main", machine=MACHINE)
    write_report(str(workdir))
    text = section(workdir / "report.md", "Tuning")
    # shift: yes − no changes sign at both lengths, the length interaction keeps its sign
    # (+0.05 more at unseen lengths, untuned and tuned).
    changed = [line for line in text.splitlines() if "**changed**" in line]
    assert len(changed) == 2 and all("shift: yes − no" in line for line in changed)
    assert any("shift × length" in line and "| kept |" in line for line in text.splitlines())
    for factor in ("shift", "size"):
        assert (workdir / f"isolation_{factor}.png").is_file()


def test_quick_keeps_the_full_sweeps_default_as_the_untuned_setting(project):
    workdir = project / "runs"
    counts = run_sweep(
        tuned_sweep(),
        "experiments/tuned.py",
        str(workdir),
        main_module="fake_main",
        machine=MACHINE,
        quick=True,
    )
    assert counts == {"finished": 8}
    with open(workdir / "sweep.json") as f:
        assert json.load(f)["nuisance_default"] == {"train.learning_rate": 1e-3}


def without_dates(report_path) -> list[str]:
    """report.md's non-empty lines less those that change with every rebuild (dates, the note
    saying it was rebuilt from runs.csv and its heading)."""
    with open(report_path) as f:
        lines = f.read().splitlines()
    skip = ("- Sweep started", "- rebuilt from", "## Notes")
    return [line for line in lines if line.strip() and not line.startswith(skip)]


def poisoned_csv(source, target, metric="test/seq_accuracy"):
    """A copy of runs.csv with every selection run's `metric` set to 0 (confirmation runs,
    "<variant>/confirm/<setting>", kept)."""
    rows = read_csv(source)
    for row in rows:
        if "/confirm/" not in row["variant"]:
            row[metric] = "0.0"
    with open(target, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def test_confirmation_runs_give_every_tuned_figure(project):
    """2 cells x 2 learning rates x 2 seeds, each chosen setting retrained on seeds 10 and 11:
    the tuned figures are those of the confirmation runs, which a rerun skips, a report rebuilt
    from runs.csv reproduces, and poisoning the selection runs' test metrics cannot move."""
    workdir = project / "runs"
    sweep = tuned_sweep(confirm_seeds=(10, 11))
    counts = run_sweep(sweep, "experiments/tuned.py", str(workdir), main_module="fake_main")
    assert counts == {"finished": 12}
    # Each variant's chosen setting (base 1e-3, shifted 1e-2) and no other, on the fresh seeds,
    # as one seed group.
    confirm = {p.relative_to(workdir).as_posix() for p in workdir.glob("*/confirm/*/seed_*")}
    assert confirm == {
        f"{v}/confirm/learning_rate-{lr}/seed_{s}"
        for v, lr in (("base", "0.001"), ("shifted", "0.01"))
        for s in (10, 11)
    }
    command = (workdir / "shifted/confirm/learning_rate-0.01/seed_10/command.txt").read_text()
    assert "--seeds=10,11" in command and "--config.train.learning_rate=0.01" in command
    # A rerun trains nothing; --status lists the confirmation runs.
    summary = workdir / "base/confirm/learning_rate-0.001/seed_10/summary.json"
    written = summary.stat().st_mtime_ns
    assert run_sweep(sweep, "experiments/tuned.py", str(workdir), main_module="fake_main") == {
        "finished": 12
    }
    assert summary.stat().st_mtime_ns == written
    from transformer_jax.sweep import slurm

    names = [s.name for s in slurm.sweep_status(str(workdir))]
    assert names[-4:] == [
        "base/confirm/learning_rate-0.001/seed_10",
        "base/confirm/learning_rate-0.001/seed_11",
        "shifted/confirm/learning_rate-0.01/seed_10",
        "shifted/confirm/learning_rate-0.01/seed_11",
    ]

    report = write_report(str(workdir))
    # Confirmation seeds 10, 11: shifted 0.8 + 0.05 + 0.105, base 0.905 (selection seeds would
    # give 0.855 and 0.805).
    results = {r["variant"]: r for r in read_csv(workdir / "results.csv")}
    assert float(results["shifted"]["test/seq_accuracy:mean"]) == pytest.approx(0.955)
    assert float(results["base"]["test/seq_accuracy:mean"]) == pytest.approx(0.905)
    assert float(results["shifted"]["test/seq_accuracy:diff"]) == pytest.approx(0.05)
    runs_csv = read_csv(workdir / "runs.csv")
    assert len(runs_csv) == 12  # no row for the confirmations of settings not chosen
    assert "Confirmation: each variant's chosen setting was trained again" in section(
        report, "Tuning"
    )

    # Rebuilt from runs.csv alone: the same report.
    committed = project / "committed"
    committed.mkdir()
    for name in ("sweep.json", "runs.csv"):
        shutil.copy(workdir / name, committed / name)
    rebuilt = write_report(str(committed), runs_csv=str(committed / "runs.csv"))
    assert without_dates(rebuilt) == without_dates(report)
    assert section(rebuilt, "Results") == section(report, "Results")
    assert section(rebuilt, "Tuning") == section(report, "Tuning")
    assert read_csv(committed / "results.csv") == read_csv(workdir / "results.csv")

    # Every selection run's test metric poisoned: no tuned figure moves.
    poisoned = project / "poisoned"
    poisoned.mkdir()
    shutil.copy(workdir / "sweep.json", poisoned / "sweep.json")
    poisoned_csv(workdir / "runs.csv", poisoned / "runs.csv")
    moved = write_report(str(poisoned), runs_csv=str(poisoned / "runs.csv"))
    assert section(moved, "Results") == section(report, "Results")
    assert read_csv(poisoned / "results.csv") == read_csv(workdir / "results.csv")
    assert read_csv(poisoned / "selection.csv") == read_csv(workdir / "selection.csv")

    def tuned_column(path):
        rows = [line.split(" | ") for line in section(path, "Tuning").splitlines()]
        return [row[4] for row in rows if len(row) > 4 and "shifted − base" in row[1]]

    assert tuned_column(moved) == tuned_column(report) != []

    # The selection changes (seed 1 of shifted now prefers 1e-3 by far): the runner refuses to
    # go on with confirmation runs of the old choice, and the report sets them aside.
    path = workdir / "shifted/learning_rate-0.001/seed_1/summary.json"
    changed = json.loads(path.read_text())
    changed["metrics"]["validation"]["loss"] = -10.0
    path.write_text(json.dumps(changed))
    with pytest.raises(ValueError, match="trained at learning_rate-0.01, but the selection now"):
        run_sweep(sweep, "experiments/tuned.py", str(workdir), main_module="fake_main")
    assert not (workdir / "shifted/confirm/learning_rate-0.001").exists()
    notes = section(write_report(str(workdir)), "Notes")
    assert "confirmation runs of shifted exist at learning_rate-0.01" in notes


def test_confirmations_wait_for_their_variants_selection(project):
    """Only base trained: its confirmation runs follow at once, shifted's wait in --status."""
    from transformer_jax.sweep import slurm

    workdir = project / "runs"
    sweep = tuned_sweep(confirm_seeds=(10,))
    counts = run_sweep(
        sweep, "experiments/tuned.py", str(workdir), variants=["base"], main_module="fake_main"
    )
    assert counts == {"finished": 5}
    states = {s.name: s.state for s in slurm.sweep_status(str(workdir))}
    assert states["base/confirm/learning_rate-0.001/seed_10"] == "finished"
    assert states["shifted/confirm/seed_10"] == "waiting"
    assert states["shifted/learning_rate-0.01/seed_0"] == "pending"


def test_a_job_launcher_submits_the_confirmations_once_the_selection_is_done(project):
    """submitit_local (the Slurm path on this machine): the first submission trains the
    selection, the next one submits the confirmation runs of the settings it chose."""
    import time

    from transformer_jax.sweep import slurm

    workdir = project / "runs"
    sweep = tuned_sweep(confirm_seeds=(10,))

    def submit():
        return slurm.submit_sweep(
            sweep,
            "experiments/tuned.py",
            str(workdir),
            launcher="submitit_local",
            slurm=slurm.SlurmResources(),
            main_module="fake_main",
        )

    def settled():
        deadline = time.monotonic() + 600  # a guard against a hang, not a speed
        while time.monotonic() < deadline:
            now = {s.name: s.state for s in slurm.sweep_status(str(workdir))}
            if not {"queued", "running"} & set(now.values()):
                return now
            time.sleep(0.2)
        raise AssertionError("jobs still running after 600 s")

    first = {s.name: s.state for s in submit()}
    assert len(first) == 8 and set(first.values()) <= {"queued", "running", "finished"}
    after_selection = settled()
    confirmations = {k: v for k, v in after_selection.items() if "/confirm/" in k}
    assert confirmations == {
        "shifted/confirm/learning_rate-0.01/seed_10": "pending",
        "base/confirm/learning_rate-0.001/seed_10": "pending",
    }, after_selection
    second = {s.name: s.state for s in submit()}
    assert set(second) == {
        "base/confirm/learning_rate-0.001/seed_10",
        "shifted/confirm/learning_rate-0.01/seed_10",
    } | set(first)
    done = settled()
    assert set(done.values()) == {"finished"} and len(done) == 10


def test_a_cell_groups_the_settings_one_program_can_train_together(project):
    """Rates and warmups (optimizer scalars) in one run group; settings that differ in anything
    else, or in whether they clip the gradient, in groups of their own."""
    from transformer_jax.sweep.launcher import GroupSpec
    from transformer_jax.sweep.runner import launches, plan

    grid = {
        "train.learning_rate": (1e-3, 1e-2),
        "train.grad_clip_norm": (0.0, 1.0, 2.0),
        "fake.offset": (0.0, 0.1),
    }
    sweep = tuned_sweep(nuisance=grid, variants={"base": {}})
    workdir, spec = str(project / "runs"), "configs/fake.py"
    units = launches(sweep, workdir, plan(sweep, workdir, spec), spec, "fake_main", True)
    groups = sorted(
        sorted({r.variant.rpartition("/")[2] for r in unit.runs})
        for unit in units
        if isinstance(unit, GroupSpec)
    )
    assert all(isinstance(unit, GroupSpec) for unit in units) and len(units) == 4
    for settings in groups:
        offsets = {name.rpartition("offset-")[2] for name in settings}
        clips = {"grad_clip_norm-0.0" in name for name in settings}
        assert len(offsets) == 1 and len(clips) == 1
