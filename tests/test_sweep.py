"""Sweep definitions and the resumable runner, driven by a tiny stand-in trainer.

The stand-in (fake_main.py, written per test) takes exactly the flags transformer_jax.main takes
and writes a run directory per the contract, so these tests exercise the real subprocess launch,
logging, failure recording and resumption without training anything.
"""

import csv
import json
import os
import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

import transformer_jax
from transformer_jax import sweep as runner
from transformer_jax import sweep_launch
from transformer_jax.sweeps import Sweep, check_overrides, format_override, load_sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(transformer_jax.__file__)))

FAKE_MAIN = """
import json, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
workdir = args["workdir"]
os.makedirs(workdir, exist_ok=True)
seed = int(args["config.seed"])
mode = args.get("config.fake.mode", "ok")
offset = float(args.get("config.fake.offset", "0.0"))
with open(os.path.join(workdir, "calls.txt"), "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
with open(os.path.join(workdir, "calls.txt")) as f:
    calls = len(f.read().splitlines())
time.sleep(0.2)  # let the runner pin this process before reading the affinity
with open(os.path.join(workdir, "affinity.json"), "w") as f:
    json.dump(sorted(os.sched_getaffinity(0)), f)
with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"seed": seed, "config": args["config"], "git_commit": "fake"}, f)
print("training", workdir, flush=True)
with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
    for step, loss in ((0, 2.0), (10, 1.0)):
        f.write(json.dumps({"step": step, "split": "train", "time": 0.1, "loss": loss}) + "\\n")
if mode == "kill":
    os.kill(os.getpid(), 9)
if mode == "no_summary":
    sys.exit(0)
if mode == "fail" or (mode == "fail_once" and calls == 1):
    print("Traceback (most recent call last):", file=sys.stderr)
    print(f"RuntimeError: boom seed {seed}", file=sys.stderr)
    sys.exit(1)
acc = 0.5 + offset + 0.01 * seed
summary = {"status": "diverged" if mode == "diverge" else "finished", "step": 10,
           "metrics": {"test": {"seq_accuracy": acc}}, "num_params": 100,
           "tokens_per_sec": 50.0, "wall_time_s": 0.3,
           "error": "loss is nan" if mode == "diverge" else None}
with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f)
sys.exit(3 if mode == "diverge" else 0)
"""

FAKE_CONFIG = """
import ml_collections


def get_config(arg=""):
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.model = ml_collections.ConfigDict(
        {"attention_scale": "sqrt", "d_model": 32, "dropout": 0.1, "tied": True,
         "widths": (1, 2), "note": None}
    )
    config.fake = ml_collections.ConfigDict({"mode": "ok", "offset": 0.0})
    config.train = ml_collections.ConfigDict({"steps": 10 if arg == "quick" else 100})
    return config
"""

SWEEP_FILE = '''
"""Scaling helps: the fake trainer scores higher with a positive offset."""
from transformer_jax.sweeps import Sweep


def get_sweep():
    return Sweep(
        config="configs/fake.py",
        variants={
            "base": {},
            "better": {"fake.offset": 0.1},
            "flaky": {"fake.mode": "fail_once"},
            "unstable": {"fake.mode": "diverge"},
        },
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
        baseline="base",
    )
'''

MACHINE = {"platform": "cpu", "device_kind": "cpu", "device_count": 1, "cpu_count": 2}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A directory laid out like the repo: configs/, experiments/ and the stand-in trainer."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "fake.py").write_text(FAKE_CONFIG)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "demo.py").write_text(SWEEP_FILE)
    (tmp_path / "fake_main.py").write_text(FAKE_MAIN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), REPO]))
    return tmp_path


def _run(workdir, **kwargs):
    sweep = load_sweep("experiments/demo.py")
    return runner.run_sweep(
        sweep,
        "experiments/demo.py",
        str(workdir),
        main_module="fake_main",
        command="python -m transformer_jax.sweep --sweep=experiments/demo.py",
        machine=MACHINE,
        **kwargs,
    )


def _calls(workdir, variant, seed):
    with open(os.path.join(workdir, variant, f"seed_{seed}", "calls.txt")) as f:
        return len(f.read().splitlines())


def _valid(**changes):
    kwargs = dict(
        config="configs/algorithmic.py",
        variants={"a": {}, "b": {"model.attention.scale": "none"}},
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
        baseline="a",
    )
    kwargs.update(changes)
    return kwargs


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"baseline": "c"}, r"baseline = 'c': must be one of the variants \['a', 'b'\]"),
        ({"variants": {}}, "variants = {}: must be a non-empty dict"),
        ({"variants": {"a/b": {}}}, "variant name 'a/b'"),
        ({"variants": {"a": {"model attention": 1}}}, "key 'model attention'"),
        ({"variants": {"a": {"seed": 1}}}, "overrides 'seed'"),
        ({"variants": {"a": {"model.x": None}}}, r"variants\['a'\]\['model.x'\] = None"),
        ({"variants": {"a": {"model.x": float("nan")}}}, "must be a finite number"),
        ({"seeds": ()}, r"seeds = \(\): must be a non-empty"),
        ({"seeds": (0, 0)}, "contains duplicates"),
        ({"seeds": (0, -1)}, "seeds contains -1"),
        ({"seeds": (True,)}, "seeds contains True"),
        ({"metrics": ()}, r"metrics = \(\): must be a non-empty"),
        ({"metrics": ("accuracy",)}, "metrics contains 'accuracy': must be 'split/metric'"),
        ({"metrics": ("test/",)}, "metrics contains 'test/'"),
        ({"config": "configs/copy"}, "config = 'configs/copy': must be the path of a .py"),
        ({"config": "configs/algorithmic.py:quick"}, "put the get_config argument in config_arg"),
    ],
)
def test_sweep_validation_errors_name_field_and_value(changes, match):
    with pytest.raises(ValueError, match=match):
        Sweep(**_valid(**changes))


def test_sweep_normalizes_and_round_trips_through_json():
    sweep = Sweep(**_valid(seeds=[0, 1], variants={"a": {}, "b": {"model.widths": [1, 2]}}))
    assert sweep.seeds == (0, 1)
    assert sweep.variants["b"]["model.widths"] == (1, 2)
    assert Sweep.from_dict(json.loads(json.dumps(sweep.to_dict()))) == sweep


def test_load_sweep_uses_docstring_and_checks_file(tmp_path):
    path = tmp_path / "s.py"
    path.write_text(SWEEP_FILE)
    sweep = load_sweep(str(path))
    assert sweep.description.startswith("Scaling helps")
    no_doc = [line for line in SWEEP_FILE.splitlines() if not line.startswith('"""')]
    path.write_text("\n".join(no_doc))
    with pytest.raises(ValueError, match="description of .* is empty"):
        load_sweep(str(path))
    path.write_text("def get_sweep():\n    return {}\n")
    with pytest.raises(ValueError, match="returned dict; it must return"):
        load_sweep(str(path))
    path.write_text("x = 1\n")
    with pytest.raises(ValueError, match="must define get_sweep"):
        load_sweep(str(path))
    with pytest.raises(ValueError, match="does not exist"):
        load_sweep(str(tmp_path / "nope.py"))


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
    sweep = Sweep(**_valid(config="configs/fake.py", variants={"a": {}, "b": overrides}))
    argv = runner.build_argv(sweep, "b", 7, "w/b/seed_7", "configs/fake.py:quick")
    assert argv[1:4] == ("-m", "transformer_jax.main", "--config=configs/fake.py:quick")
    assert argv[4:7] == (
        "--workdir=w/b/seed_7",
        "--config.seed=7",
        "--config.model.attention_scale=none",
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
        section, field = key.split(".")
        assert config[section][field] == value and type(config[section][field]) is type(
            1.0 if key == "fake.offset" else value
        )
    assert format_override(True) == "true" and format_override(0.1) == "0.1"


def test_check_overrides_against_the_config(project):
    def check(overrides):
        check_overrides(Sweep(**_valid(config="configs/fake.py", variants={"a": overrides})), "")

    check({"model.d_model": 8, "model.dropout": 0, "model.widths": (1,)})
    with pytest.raises(ValueError, match="'model.dmodel', which is not a field"):
        check({"model.dmodel": 8})
    with pytest.raises(
        ValueError, match=r"\['model.d_model'\] = 8.5 \(float\), but the field .* is int"
    ):
        check({"model.d_model": 8.5})
    with pytest.raises(ValueError, match="config flags can only override"):
        check({"model.note": "x"})
    with pytest.raises(ValueError, match="does not exist"):
        check_overrides(Sweep(**_valid(variants={"a": {}})), "")


def test_run_then_resume(project):
    workdir = project / "out"
    # Left over from an interrupted earlier launch: a directory without summary or failure.
    os.makedirs(workdir / "better" / "seed_1")
    counts = _run(workdir)
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

    counts = _run(workdir)
    assert counts == {"finished": 6, "diverged": 2}
    # Finished and diverged runs were not relaunched; the failed one was retried and cleaned up.
    assert _calls(workdir, "base", 0) == 1 and _calls(workdir, "unstable", 0) == 1
    assert _calls(workdir, "flaky", 0) == 2 and _calls(workdir, "better", 1) == 1
    assert not (workdir / "flaky" / "seed_0" / "failure.json").exists()
    assert len(json.loads((workdir / "sweep.json").read_text())["invocations"]) == 2
    assert "| flaky | 0.505 ± 0.007 (n=2)" in (workdir / "report.md").read_text()


def test_selection_and_changed_command(project):
    workdir = project / "out"
    counts = _run(workdir, variants=["base"], seeds=[1])
    assert counts == {"finished": 1}
    assert not (workdir / "base" / "seed_0").exists()
    # The report covers the whole sweep and counts what has not run.
    assert "| 1 | 0 | 0 | 1 |" in (workdir / "report.md").read_text()
    with pytest.raises(ValueError, match="--variants contains 'nope'; valid: base, better"):
        _run(workdir, variants=["nope"])
    with pytest.raises(ValueError, match="--seeds contains 5"):
        _run(workdir, seeds=[5])
    # The same workdir with a different config argument would mix incomparable runs.
    with pytest.raises(ValueError, match="made by a different command"):
        _run(workdir, variants=["base"], seeds=[1], quick=True)
    with pytest.raises(ValueError, match="parallel = 0"):
        _run(workdir, parallel=0)


def test_workdir_lock(project):
    workdir = project / "out"
    workdir.mkdir()
    lock = workdir / ".sweep.lock"
    host = sweep_launch.socket.gethostname()
    lock.write_text(json.dumps({"pid": os.getpid(), "hostname": host}))
    with pytest.raises(ValueError, match="another sweep runner"):
        _run(workdir, variants=["base"], seeds=[0])
    assert not (workdir / "base").exists()
    # A lock left by a runner that no longer exists is taken over.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "hostname": host}))
    assert _run(workdir, variants=["base"], seeds=[0]) == {"finished": 1}
    assert not lock.exists()


def test_killed_run_fails_and_stopped_run_stays_resumable(project):
    sweep = Sweep(
        config="configs/fake.py",
        variants={
            "base": {},
            "killed": {"fake.mode": "kill"},
            "silent": {"fake.mode": "no_summary"},
        },
        seeds=(0,),
        metrics=("test/seq_accuracy",),
        baseline="base",
        description="d",
    )
    workdir = project / "out"
    counts = runner.run_sweep(sweep, "s.py", str(workdir), main_module="fake_main", machine=MACHINE)
    # "silent" exits 0 without a summary, as the trainer does when stopped by SIGTERM.
    assert counts == {"finished": 1, "failed": 1, "incomplete": 1}
    killed = json.loads((workdir / "killed" / "seed_0" / "failure.json").read_text())
    assert killed["returncode"] == -9 and killed["error"] == "killed by SIGKILL (out of memory?)"
    assert not (workdir / "silent" / "seed_0" / "failure.json").exists()
    assert "killed/seed_0 failed (return code -9)" in (workdir / "report.md").read_text()


def test_parallel_runs_are_pinned_to_disjoint_cpus(project):
    workdir = project / "out"
    counts = _run(workdir, variants=["base", "better"], parallel=2)
    assert counts == {"finished": 4}
    available = sorted(os.sched_getaffinity(0))
    expected = max(1, len(available) // 2)
    for variant in ("base", "better"):
        for seed in (0, 1):
            run = workdir / variant / f"seed_{seed}"
            assert len(json.loads((run / "affinity.json").read_text())) == expected
            assert "# pinned to CPUs" in (run / "command.txt").read_text()
    slots = sweep_launch.cpu_slots(2)
    if len(available) >= 2:
        assert not set(slots[0]) & set(slots[1])


def test_cli_quick_and_report_only(project):
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "transformer_jax.sweep", "--sweep=experiments/demo.py"]
    cmd += ["--workdir=out", "--main_module=fake_main", "--quick", "--variants=base,better"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "[4/4]" in done.stderr and "ETA" in done.stderr
    assert "--config=configs/fake.py:quick" in (project / "out/base/seed_0/command.txt").read_text()
    report = (project / "out" / "report.md").read_text()
    assert "--quick" in report and "(quick: every run shrunk)" in report
    (project / "out" / "report.md").unlink()

    cmd = [sys.executable, "-m", "transformer_jax.sweep", "--workdir=out", "--report_only"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (project / "out" / "report.md").exists()

    bad = [sys.executable, "-m", "transformer_jax.sweep", "--sweep=nope.py", "--workdir=out"]
    done = subprocess.run(bad, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "sweep file 'nope.py' does not exist" in done.stderr
