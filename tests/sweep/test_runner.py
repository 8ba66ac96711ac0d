"""The runner: trainer commands whose flags parse back exactly, resuming, run selection."""

import csv
import json
import os
import sys

import pytest
from absl import flags
from google.protobuf import json_format
from ml_collections import config_flags
from ml_collections.config_flags import config_path
from sweep_fixtures import calls, run_demo, valid_kwargs

from transformer_jax import commands
from transformer_jax.report.report import write_report
from transformer_jax.sweep import Sweep, format_override, runner
from transformer_jax.tracking import hparams as tracking_hparams


def test_overrides_parse_back_exactly_through_config_flags(project, monkeypatch):
    """The flag text the runner writes is what ml_collections parses back to the sweep value."""
    overrides = {
        "model.attention.scale": "none",
        "model.d_model": 64,
        "model.dropout": 1e-07,
        "model.tied": False,
        "model.widths": (3, 4, 5),
        "fake.offset": 2,  # an int for a float field
    }
    sweep = Sweep(**valid_kwargs(config="configs/fake.py", variants={"a": {}, "b": overrides}))
    argv = runner.build_argv(sweep, "b", 7, "w/b/seed_7", "configs/fake.py:quick")
    assert argv[1:4] == ("-m", "transformer_jax.main", "--config=configs/fake.py:quick")
    assert argv[4:7] == (
        "--workdir=w/b/seed_7",
        "--config.seed=7",
        "--config.model.attention.scale=none",
    )
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=fv)
    flags.DEFINE_string("workdir", None, "", flag_values=fv)
    # config_flags discovers the override flags from sys.argv.
    monkeypatch.setattr(sys, "argv", ["main", *argv[3:]])
    fv(sys.argv)
    config = fv.config
    assert config.seed == 7 and config.train.steps == 10  # quick reached get_config
    for key, value in overrides.items():
        parsed = config_path.get_value(key, config)
        assert parsed == value and type(parsed) is type(1.0 if key == "fake.offset" else value)
    assert format_override(True) == "true" and format_override(0.1) == "0.1"


def test_run_then_resume(project):
    workdir = project / "out"
    # Left over from an interrupted earlier launch: a directory without summary or failure.
    os.makedirs(workdir / "better" / "seed_1")
    counts = run_demo(workdir, seed_groups=False)
    # flaky fails on the first launch of each of its runs and succeeds when retried.
    assert counts == {"finished": 4, "diverged": 2, "failed": 2}

    run = workdir / "base" / "seed_0"
    command = (run / "command.txt").read_text()
    assert "-m fake_main --config=configs/fake.py --workdir=" in command
    assert command.rstrip().endswith("--config.seed=0")
    assert "--config.fake.offset=0.1" in (workdir / "better" / "seed_1" / "command.txt").read_text()
    assert "training" in (run / "run.log").read_text()

    failure = json.loads((workdir / "flaky" / "seed_0" / "failure.json").read_text())
    assert failure["returncode"] == 1 and failure["status"] == "failed"
    assert "RuntimeError: boom seed 0" in failure["stderr_tail"]
    assert failure["error"] == "RuntimeError: boom seed 0"
    assert "RuntimeError: boom seed 0" in (workdir / "flaky" / "seed_0" / "run.log").read_text()
    diverged = json.loads((workdir / "unstable" / "seed_1" / "failure.json").read_text())
    assert diverged["status"] == "diverged" and diverged["returncode"] == 3

    resolved = json.loads((workdir / "sweep.json").read_text())
    assert resolved["file"] == "experiments/demo.py" and resolved["baseline"] == "base"
    assert resolved["variants"]["better"] == {"fake.offset": 0.1}
    assert resolved["seeds"] == [0, 1] and resolved["metrics"] == ["test/seq_accuracy"]
    assert len(resolved["invocations"]) == 1
    assert not (workdir / ".sweep.lock").exists()

    with open(workdir / "results.csv") as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    # (0.6 + 0.01 seed) - (0.5 + 0.01 seed) for both seeds.
    assert float(rows["better"]["test/seq_accuracy:diff"]) == pytest.approx(0.1)
    assert rows["unstable"]["n_diverged"] == "2"

    counts = run_demo(workdir, seed_groups=False)
    assert counts == {"finished": 6, "diverged": 2}
    # Finished and diverged runs were not relaunched; the failed one was retried and cleaned up.
    assert calls(workdir, "base", 0) == 1 and calls(workdir, "unstable", 0) == 1
    assert calls(workdir, "flaky", 0) == 2 and calls(workdir, "better", 1) == 1
    assert not (workdir / "flaky" / "seed_0" / "failure.json").exists()
    assert len(json.loads((workdir / "sweep.json").read_text())["invocations"]) == 2
    assert "| flaky | 0.505 ± 0.007 (n=2)" in (workdir / "report.md").read_text()


def test_selection_and_changed_command(project):
    workdir = project / "out"
    counts = run_demo(workdir, variants=["base"], seeds=[1])
    assert counts == {"finished": 1}
    assert not (workdir / "base" / "seed_0").exists()
    # The report covers the whole sweep and counts what has not run.
    assert "| 1 | 0 | 0 | 1 |" in (workdir / "report.md").read_text()
    with pytest.raises(ValueError, match="--variants contains 'nope'; valid: base, better"):
        run_demo(workdir, variants=["nope"])
    with pytest.raises(ValueError, match="--seeds contains 5"):
        run_demo(workdir, seeds=[5])
    # The same workdir with a different config argument would mix incomparable runs.
    with pytest.raises(ValueError, match="made by a different command"):
        run_demo(workdir, variants=["base"], seeds=[1], quick=True)
    with pytest.raises(ValueError, match="parallel = 0"):
        run_demo(workdir, parallel=0)


def test_a_command_recorded_relative_to_the_repository_matches_its_rerun(project):
    """A committed command.txt names its run directory relative to the repository and its
    interpreter as `python`; rerunning the sweep from there accepts it as the same command,
    and refuses it once it differs."""
    workdir = project / "out"
    assert run_demo(workdir, variants=["base"], seeds=[1]) == {"finished": 1}
    command_file = workdir / "base" / "seed_1" / "command.txt"
    lines = command_file.read_text().splitlines()
    argv = lines[-1].split(" && ", 1)[1].split()
    argv = [arg for arg in argv if "=" not in arg or arg.startswith("-")]  # no VAR=value
    relative = [
        f"--workdir={os.path.relpath(a[10:])}" if a.startswith("--workdir=") else a for a in argv
    ]
    assert relative != argv and not os.path.isabs(relative[-2].partition("=")[2])
    command_file.write_text("\n".join([*lines[:-1], " ".join(["python", *relative[1:]])]) + "\n")
    assert run_demo(workdir, variants=["base"], seeds=[1]) == {"finished": 1}
    command_file.write_text(command_file.read_text().replace("--config.seed=1", "--config.seed=2"))
    with pytest.raises(ValueError, match="made by a different command"):
        run_demo(workdir, variants=["base"], seeds=[1])


def test_a_sweep_directory_moved_elsewhere_is_rerun_as_its_own(project):
    """Only --workdir differs from the recorded commands: the same runs, none retrained; a real
    difference is refused without advice to delete run directories."""
    assert run_demo(project / "out", variants=["base"], seeds=[1]) == {"finished": 1}
    os.rename(project / "out", project / "moved")
    assert run_demo(project / "moved", variants=["base"], seeds=[1]) == {"finished": 1}
    assert calls(project / "moved", "base", 1) == 1
    with pytest.raises(ValueError, match="made by a different command") as refused:
        run_demo(project / "moved", variants=["base"], seeds=[1], quick=True)
    assert "delete" not in str(refused.value)


def test_a_sweep_run_in_the_repository_records_paths_relative_to_it(project, monkeypatch):
    """command.txt, run.log and sweep.json of a sweep launched from the repository name no
    directory of the machine, and a rerun still recognises its runs as its own."""
    monkeypatch.setattr(commands, "REPOSITORY", str(project))
    workdir = project / "out"
    assert run_demo(workdir, variants=["base"], seeds=[0, 1]) == {"finished": 2}
    for seed in (0, 1):
        run = workdir / "base" / f"seed_{seed}"
        headers = [line for line in (run / "run.log").read_text().splitlines() if "=====" in line]
        assert headers and not any(str(project) in line for line in headers)
        assert str(project) not in (run / "command.txt").read_text()
        assert f"--workdir=out/base/seed_{seed}" in (run / "command.txt").read_text()
    assert json.loads((workdir / "sweep.json").read_text())["cwd"] == "."
    assert run_demo(workdir, variants=["base"], seeds=[0, 1]) == {"finished": 2}
    assert calls(workdir, "base", 0) == 1


def test_a_launch_with_an_absolute_workdir_is_recorded_and_reported_without_it(project):
    """sweep.json and report.md are committed: the workdir's path is written `<workdir>`, also
    in a report rebuilt from a launch recorded before the runner did so."""
    workdir = project / "out"
    command = f"python -m transformer_jax.sweep --sweep=experiments/demo.py --workdir={workdir}"
    assert run_demo(workdir, variants=["base"], seeds=[1], command=command) == {"finished": 1}
    recorded = json.loads((workdir / "sweep.json").read_text())
    assert recorded["invocations"][-1]["command"].endswith("--workdir=<workdir>")
    recorded["invocations"][-1]["command"] = command  # as older launches were recorded
    (workdir / "sweep.json").write_text(json.dumps(recorded))
    write_report(str(workdir))
    report = (workdir / "report.md").read_text()
    assert str(workdir) not in report and "--workdir=<workdir>`" in report


def _results(workdir):
    with open(workdir / "results.csv") as f:
        return list(csv.DictReader(f))


def test_seed_groups_train_each_variant_in_one_process(project):
    """The default: one process per variant with all its pending seeds, each seed in its own
    run directory, and the same report as separate runs; a group whose process fails leaves
    every seed failed with the group's error."""
    variants = ["base", "better", "unstable", "flaky"]
    grouped, separate = project / "grouped", project / "separate"
    counts = run_demo(grouped, variants=variants)
    assert counts == run_demo(separate, variants=variants, seed_groups=False)
    assert counts == {"finished": 4, "diverged": 2, "failed": 2}
    for seed in (0, 1):
        run = grouped / "base" / f"seed_{seed}"
        assert calls(grouped, "base", seed) == 1
        assert f"--workdir={grouped / 'base'} --seeds=0,1" in (run / "calls.txt").read_text()
        command = (run / "command.txt").read_text()
        assert "# trained in the seed group base/seed_{0,1} by:" in command
        # The last line trains this seed alone: it resumes the run, and sweeps compare it.
        assert command.rstrip().endswith(f"--workdir={run} --config.seed={seed}")
        log = (run / "run.log").read_text()
        assert f"training {grouped / 'base' / 'seed_0'}" in log
        assert f"training {grouped / 'base' / 'seed_1'}" in log
        failure = json.loads((grouped / "flaky" / f"seed_{seed}" / "failure.json").read_text())
        assert failure["error"] == "RuntimeError: boom seed 0"
    assert (
        json.loads((grouped / "unstable" / "seed_1" / "failure.json").read_text())["status"]
        == "diverged"
    )
    assert _results(grouped) == _results(separate)
    # A rerun resumes as separate runs do: only the failed seeds start again (as one group).
    assert run_demo(grouped, variants=variants)["diverged"] == 2
    assert calls(grouped, "base", 0) == 1 and calls(grouped, "flaky", 0) == 2


def test_each_run_gets_its_hparams_before_it_starts(project):
    """hparams.json of every launched run (read by its HParams session and W&B run): variant,
    seed and every overridden field, the base config's value where a variant keeps it; the
    report's HParams session of each ended run has them too."""
    run_demo(project / "out", variants=["base", "better", "unstable"], seeds=[1])
    for variant, offset in (("base", 0.0), ("better", 0.1), ("unstable", 0.0)):
        run = project / "out" / variant / "seed_1"
        mode = "diverge" if variant == "unstable" else "ok"
        expected = {
            "variant": variant,
            "seed": 1,
            "fake.offset": offset,
            "fake.mode": mode,
        }
        stored = json.loads((run / "hparams.json").read_text())
        assert stored == {"sweep": "out", "hparams": expected}
        start = tracking_hparams.read_session_start(run)
        session = {**expected, "seed": "1"}  # TensorBoard shows the seed as its digits
        assert {k: json_format.MessageToDict(v) for k, v in start.hparams.items()} == session
        assert start.group_name == f"out/{variant}"  # the variant's seeds: one group
    assert not (project / "out" / "flaky").exists()


@pytest.mark.parametrize(
    "sweep_file", ["experiments/quickstart.py", "experiments/length_generalization.py"]
)
def test_every_variant_trains_as_one_seed_group(sweep_file, tmp_path, monkeypatch):
    """Early stopping included (length_generalization.py stops early): a seed group stops each
    seed at its own step (tests/train/test_seed_group.py)."""
    from pathlib import Path

    from transformer_jax.sweep import load_sweep

    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # sweeps name configs from the root
    sweep = load_sweep(sweep_file)
    spec = f"{sweep.config}:{sweep.config_arg}" if sweep.config_arg else sweep.config
    todo = runner.plan(sweep, str(tmp_path), spec)
    units = runner.launches(sweep, str(tmp_path), todo, spec, runner.DEFAULT_MAIN, True)
    assert len(units) == len(sweep.run_variants) < len(todo)
