"""Launching runs: the workdir lock, how a killed or stopped run is recorded, CPU pinning, GPU
placement and the shared compilation cache."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from sweep_fixtures import MACHINE, run_demo

from transformer_jax.report.report import write_report
from transformer_jax.sweep import Sweep, launcher, run_sweep, runner


def test_workdir_lock(project):
    workdir = project / "out"
    workdir.mkdir()
    lock = workdir / ".sweep.lock"
    host = launcher.socket.gethostname()
    lock.write_text(json.dumps({"pid": os.getpid(), "hostname": host}))
    with pytest.raises(ValueError, match="another sweep runner"):
        run_demo(workdir, variants=["base"], seeds=[0])
    assert not (workdir / "base").exists()
    # A lock left by a runner that no longer exists is taken over.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "hostname": host}))
    assert run_demo(workdir, variants=["base"], seeds=[0]) == {"finished": 1}
    assert not lock.exists()


def test_a_run_dies_with_its_killed_runner(tmp_path):
    """kill -9 of the runner must not leave its trainer writing the run directory."""
    runner = f"""
import sys, time
from transformer_jax.sweep import launcher
spec = launcher.RunSpec("v", 0, {str(tmp_path / "run")!r}, (sys.executable, "-c",
    "import time; time.sleep(3600)"))
print(launcher.Launch(spec, None, ".").proc.pid, flush=True)
time.sleep(3600)
"""
    parent = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    # The child sleeps for an hour: dying within the guard below (against a hang, not a speed
    # bound) can only be the parent death signal.
    deadline = time.monotonic() + 600
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    survived = _alive(child)
    if survived:
        os.kill(child, signal.SIGKILL)
    assert not survived


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie (unreaped orphan) is dead
    except FileNotFoundError:
        return False


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
    counts = run_sweep(sweep, "s.py", str(workdir), main_module="fake_main", machine=MACHINE)
    write_report(str(workdir))
    # "silent" exits 0 without a summary, as the trainer does when stopped by SIGTERM.
    assert counts == {"finished": 1, "failed": 1, "incomplete": 1}
    killed = json.loads((workdir / "killed" / "seed_0" / "failure.json").read_text())
    assert killed["returncode"] == -9 and killed["error"] == "killed by SIGKILL (out of memory?)"
    assert not (workdir / "silent" / "seed_0" / "failure.json").exists()
    assert "killed/seed_0 failed (return code -9)" in (workdir / "report.md").read_text()


def test_parallel_runs_are_pinned_to_disjoint_cpus(project):
    workdir = project / "out"
    counts = run_demo(workdir, variants=["base", "better"], parallel=2)
    assert counts == {"finished": 4}
    available = sorted(os.sched_getaffinity(0))
    expected = max(1, len(available) // 2)
    for variant in ("base", "better"):
        for seed in (0, 1):
            run = workdir / variant / f"seed_{seed}"
            assert len(json.loads((run / "affinity.json").read_text())) == expected
            assert "# pinned to CPUs" in (run / "command.txt").read_text()
    slots = launcher.cpu_slots(2)
    if len(available) >= 2:
        assert not set(slots[0]) & set(slots[1])


def test_parallel_runs_get_their_own_gpus_and_share_a_compile_cache(project, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.delenv(
        "JAX_COMPILATION_CACHE_DIR", raising=False
    )  # the session's (tests/conftest.py)
    workdir = project / "out"
    assert run_demo(workdir, variants=["base", "better"], parallel=2) == {"finished": 4}
    environments = {
        variant: json.loads((workdir / variant / "seed_0" / "environment.json").read_text())
        for variant in ("base", "better")
    }
    assert {e["CUDA_VISIBLE_DEVICES"] for e in environments.values()} == {"0,1", "2,3"}
    cache = str((workdir / ".compile_cache").resolve())
    assert {e["JAX_COMPILATION_CACHE_DIR"] for e in environments.values()} == {cache}
    assert (
        f"JAX_COMPILATION_CACHE_DIR={cache}"
        in (workdir / "base" / "seed_0" / "command.txt").read_text()
    )

    uncached = project / "uncached"
    run_demo(uncached, variants=["base"], compile_cache=False)
    environment = json.loads((uncached / "base" / "seed_0" / "environment.json").read_text())
    assert environment["JAX_COMPILATION_CACHE_DIR"] is None


@pytest.mark.parametrize(
    "visible, parallel, expected",
    [
        ("0,1,2,3", 2, [["0", "1"], ["2", "3"]]),
        ("0,1,2,3", 3, [["0"], ["1"], ["2"]]),
        ("4,5", 3, [["4"], ["5"], ["4"]]),  # more runs than GPUs: some share one
        ("0,1", 1, [None]),  # one run at a time uses every GPU
        ("0", 2, [None, None]),  # a single GPU: nothing to place
    ],
)
def test_gpu_slots(visible, parallel, expected, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert launcher.gpu_slots(parallel) == expected


def test_a_compile_cache_set_by_the_user_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path))
    assert runner.compile_cache_env("out") == {}
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    env = runner.compile_cache_env("out")
    assert env["JAX_COMPILATION_CACHE_DIR"] == os.path.abspath("out/.compile_cache")
