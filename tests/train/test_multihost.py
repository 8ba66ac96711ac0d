"""Multi-host training for real: 2 processes x 4 simulated CPU devices each (gloo collectives),
started by transformer_jax.launch_local as a pod slice starts one process per host, against one
process with 8 devices. The cases each process runs are in multihost_cases.py.

Tolerance: 1 x 8 and 2 x 4 compile the same program over 8 devices, but cross-process
reductions run through gloo in another order than XLA's in-process ones, so float32 results
differ in the last bits: losses agree to rel 1e-5 and parameters to abs 1e-5 after 20 steps.
A run resumed on the same 2 processes is bit-identical to the uninterrupted one.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from multihost_cases import config_of
from train_fixtures import read_metrics

from transformer_jax import data, run_dir
from transformer_jax.launch_local import parse_args
from transformer_jax.tracking.hparams import SESSION_SUFFIX, session_files
from transformer_jax.train import multihost
from transformer_jax.train.restore import load_run

REPO = Path(__file__).resolve().parents[2]
LOSS_RTOL, PARAM_ATOL = 1e-5, 1e-5


def run(case: str, workdir: Path, options: dict, processes: int = 2) -> subprocess.CompletedProcess:
    """`multihost_cases CASE` on 8 CPU devices: one process of 8, or `processes` launched by
    launch_local with 8 / processes each."""
    paths = [REPO, REPO / "tests", REPO / "tests" / "train"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_FLAGS"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(map(str, paths)))
    case_args = [case, str(workdir), json.dumps(options)]
    if processes == 1:
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        command = [sys.executable, "-m", "multihost_cases", *case_args]
    else:
        launch = [f"--num_processes={processes}", f"--cpu_devices={8 // processes}"]
        command = [sys.executable, "-m", "transformer_jax.launch_local", *launch]
        command += ["--module=multihost_cases", "--grace_s=10", "--", *case_args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def finished(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tfds")


def test_launch_variables_are_checked_before_anything_starts():
    address = {multihost.COORDINATOR_VAR: "localhost:1234"}
    assert multihost.launch_args({}) is None  # one process, or discovery left to JAX
    assert multihost.launch_args({**address, "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}) == {
        "coordinator_address": "localhost:1234",
        "num_processes": 4,
        "process_id": 3,
    }
    bad = [
        ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}, "missing: JAX_COORDINATOR_ADDRESS"),
        ({**address, "JAX_NUM_PROCESSES": "2"}, "missing: JAX_PROCESS_ID"),
        ({**address, "JAX_NUM_PROCESSES": "two", "JAX_PROCESS_ID": "0"}, "JAX_NUM_PROCESSES='two'"),
        ({**address, "JAX_NUM_PROCESSES": "0", "JAX_PROCESS_ID": "0"}, "JAX_NUM_PROCESSES=0"),
        ({**address, "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"}, r"valid: .*\[0, 1\]"),
        ({"JAX_COORDINATOR_ADDRESS": "h", "JAX_NUM_PROCESSES": "1", "JAX_PROCESS_ID": "0"}, "port"),
    ]
    for environ, match in bad:
        with pytest.raises(ValueError, match=match):
            multihost.launch_args(environ)
    with pytest.raises(SystemExit):
        parse_args(["--num_processes=0", "--", "--workdir=x"])
    args, theirs = parse_args(["--num_processes=2", "--cpu_devices=4", "--", "--workdir=x"])
    assert (args.num_processes, args.cpu_devices, theirs) == (2, 4, ["--workdir=x"])


def test_one_failing_process_ends_the_launch_with_its_status():
    """Process 1 exits with 5; the 2 others, stuck as if in a collective, are stopped after
    the grace period (SIGTERM, then SIGKILL) instead of waiting forever."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "train")])}
    launch = ["--num_processes=3", "--module=stuck_process", "--grace_s=0.5", "--", "1", "5"]
    command = [sys.executable, "-m", "transformer_jax.launch_local", *launch]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 5, result.stderr


def test_processes_keep_disjoint_rows_whose_union_is_the_global_batch(tmp_path, data_dir):
    """Each of 2 launched processes keeps half of every global batch; together, in process
    order, they are the batch one process reads, at each of 20 steps."""
    options = {"data_dir": str(data_dir), "steps": 20}
    finished(run("rows", tmp_path, options))
    kept = np.load(tmp_path / "rows.npz")
    config = config_of(options)
    batches = data.load_dataset(config.data).train_iterator(
        seed=config.seed, batch_size=config.data.batch_size
    )
    for step in range(20):
        batch = next(batches)
        for key, rows in batch.items():
            per_process = kept[f"{key}_{step}"]
            assert per_process.shape == (2, len(rows) // 2, *rows.shape[1:])
            np.testing.assert_array_equal(per_process.reshape(rows.shape), rows)
        assert not np.array_equal(kept[f"targets_{step}"][0], kept[f"targets_{step}"][1])


_RUNS: dict[str, Path] = {}


def trained(name: str, tmp_path_factory, data_dir, processes: int, **train) -> Path:
    """The workdir of a finished 20-step run, trained once per module."""
    if name not in _RUNS:
        workdir = tmp_path_factory.mktemp(name)
        finished(run("train", workdir, {"data_dir": str(data_dir), "train": train}, processes))
        _RUNS[name] = workdir
    return _RUNS[name]


def params_of(workdir: Path) -> dict:
    return jax.device_get(load_run(str(workdir)).state.params)


def max_param_diff(a: Path, b: Path) -> float:
    diffs = jax.tree.map(lambda x, y: float(np.max(np.abs(x - y))), params_of(a), params_of(b))
    return max(jax.tree.leaves(diffs))


def assert_same_metrics(lines: list[dict], expected: list[dict], rtol: float) -> None:
    assert [(m["step"], m["split"]) for m in lines] == [(m["step"], m["split"]) for m in expected]
    for line, want in zip(lines, expected, strict=True):
        assert line.keys() == want.keys()
        for name, value in want.items():
            if name not in ("step", "split"):
                assert line[name] == pytest.approx(value, rel=rtol, abs=rtol), (line, name)


@pytest.mark.slow
@pytest.mark.parametrize("fsdp", [1, 8], ids=["data_parallel", "fsdp8"])
def test_two_processes_train_as_one(tmp_path_factory, data_dir, fsdp):
    """20 steps of 2 x 4 devices equal 1 x 8 (losses, eval metrics, parameters); fsdp=8 shards
    every parameter across both processes."""
    one = trained(f"one_fsdp{fsdp}", tmp_path_factory, data_dir, 1, fsdp=fsdp)
    two = trained(f"two_fsdp{fsdp}", tmp_path_factory, data_dir, 2, fsdp=fsdp)
    assert_same_metrics(read_metrics(two), read_metrics(one), LOSS_RTOL)
    assert max_param_diff(two, one) < PARAM_ATOL


def run_files(workdir: Path) -> list[str]:
    """The files of a run directory, the TensorBoard events file (named by time) as "events"."""
    names = (p.name for p in workdir.iterdir() if p.name != run_dir.LOCK_FILE)
    return sorted("events" if n.startswith("events.out.tfevents.") else n for n in names)


@pytest.mark.slow
def test_process_zero_alone_writes_the_run_files(tmp_path_factory, data_dir):
    two = trained("two_fsdp1", tmp_path_factory, data_dir, 2, fsdp=1)
    one = trained("one_fsdp1", tmp_path_factory, data_dir, 1, fsdp=1)
    # One TensorBoard events file and one HParams session (tracking/hparams.py), process 0's.
    events = [p for p in two.glob("events.out.tfevents.*") if p.suffix != SESSION_SUFFIX]
    assert len(events) == 1 and len(session_files(two)) == 1
    assert run_files(two) == run_files(one)
    assert len(read_metrics(two)) == len(read_metrics(one))  # no line written twice
    config = {k: v for k, v in run_dir.read_config(two).items() if k != run_dir.GIT_COMMIT_KEY}
    assert config == {k: v for k, v in run_dir.read_config(one).items() if k in config}
    summary = run_dir.read_summary(two)
    assert summary.status == "finished" and summary.step == 20
    assert_same_metrics(
        [{"step": 20, "split": "test", **summary.metrics["test"]}],
        [{"step": 20, "split": "test", **run_dir.read_summary(one).metrics["test"]}],
        LOSS_RTOL,
    )


def checkpoint_steps(workdir: Path) -> list[int]:
    return sorted(
        int(p.name) for p in (workdir / run_dir.CHECKPOINT_DIR).iterdir() if p.name.isdigit()
    )


@pytest.mark.slow
def test_a_killed_run_resumes_on_two_processes_or_one(tmp_path, tmp_path_factory, data_dir):
    """Both processes SIGKILLed after the checkpoint of step 10: resumed on 2 processes the run
    ends bit-identical to the uninterrupted one; resumed from the same checkpoint on 1
    process, with the same parameters (to PARAM_ATOL)."""
    uninterrupted = trained("two_fsdp1", tmp_path_factory, data_dir, 2, fsdp=1)
    killed = tmp_path / "killed"
    fault = {"kind": "kill", "at": 16, "after": 10, "process": None}
    result = run("train", killed, {"data_dir": str(data_dir), "fault": fault})
    assert result.returncode == 128 + 9, result.stderr[-3000:]
    assert checkpoint_steps(killed) == [10]
    on_one = tmp_path / "on_one"
    shutil.copytree(killed, on_one)
    options = {"data_dir": str(data_dir)}
    assert "Resumed" in finished(run("train", killed, options)).stdout
    assert read_metrics(killed) == read_metrics(uninterrupted)
    assert max_param_diff(killed, uninterrupted) == 0.0
    assert "Resumed" in finished(run("train", on_one, options, processes=1)).stdout
    assert_same_metrics(read_metrics(on_one), read_metrics(uninterrupted), LOSS_RTOL)
    assert max_param_diff(on_one, uninterrupted) < PARAM_ATOL


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_at_one_step_with_one_checkpoint(tmp_path, data_dir):
    fault = {"kind": "sigterm", "at": 7, "process": 1}
    result = run("train", tmp_path, {"data_dir": str(data_dir), "fault": fault})
    assert result.returncode == run_dir.STOPPED_EXIT_CODE, result.stderr[-3000:]
    for process in (0, 1):
        assert f"process {process}: stopped at step 7" in result.stdout
    assert checkpoint_steps(tmp_path) == [7]
    assert run_dir.read_summary(tmp_path) is None  # stopped runs write none: rerun to resume


@pytest.mark.slow
def test_nan_on_one_process_stops_both_as_diverged(tmp_path, data_dir):
    """A NaN in a row only process 1 trains on (step 7) reaches the global loss: both
    processes stop at the window's end (step 10) and one "diverged" summary is written."""
    fault = {"kind": "nan", "at": 7, "process": 1}
    result = run("train", tmp_path, {"data_dir": str(data_dir), "fault": fault})
    assert result.returncode == run_dir.DIVERGED_EXIT_CODE, result.stderr[-3000:]
    for process in (0, 1):
        assert f"process {process}: diverged at step 10" in result.stdout
    summary = run_dir.read_summary(tmp_path)
    assert summary.status == "diverged" and summary.step == 10 and "loss" in summary.error
    assert checkpoint_steps(tmp_path) == []  # step 10's save never started: the loss came first
