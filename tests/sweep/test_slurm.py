"""The job launchers: submitit's LocalExecutor end to end (real job pickles, job folders and
processes), and the Slurm executor's sbatch script and sacct states on a stand-in cluster (srun,
sbatch and sacct as shell scripts on PATH; submitit itself is not replaced).

The stand-in trainer (launch_main.py) takes the trainer's flags and keeps its signal contract:
mode "wait" saves a checkpoint (step 5), trains until SIGTERM, then saves (step 7) and exits
STOPPED_EXIT_CODE; a later call resumes from the checkpoint and finishes.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import submitit

from transformer_jax import sweep_dir
from transformer_jax.run_dir import STOPPED_EXIT_CODE
from transformer_jax.sweep import load_sweep, slurm

TESTS = str(Path(__file__).resolve().parents[1])  # hooked_iterator.py

TRAINER = f"""
import json, os, signal, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
root, mode = args["workdir"], args.get("config.fake.mode", "ok")
# A seed group (--seeds) trains WORKDIR/seed_<seed>/ for each seed, as main --seeds does.
seeds = args["seeds"].split(",") if "seeds" in args else None
workdirs = [os.path.join(root, f"seed_{{s}}") for s in seeds] if seeds else [root]
def write(workdir, name, obj):
    path = os.path.join(workdir, name)
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)
resumed, calls = None, 0
for workdir in workdirs:
    os.makedirs(workdir, exist_ok=True)
    if os.path.exists(os.path.join(workdir, "checkpoint.json")):
        resumed = json.load(open(os.path.join(workdir, "checkpoint.json")))["step"]
    with open(os.path.join(workdir, "calls.txt"), "a") as f:
        f.write(f"{{resumed}}\\n")
    calls = len(open(os.path.join(workdir, "calls.txt")).read().splitlines())
if mode == "fail_once" and calls == 1:
    print("RuntimeError: boom", file=sys.stderr)
    sys.exit(1)
if mode == "wait" and resumed is None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    blocked = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    for workdir in workdirs:
        write(workdir, "checkpoint.json", {{"step": 5}})
        write(workdir, "process.json", {{"pid": os.getpid(), "ppid": os.getppid(),
                                         "blocked": blocked}})
    deadline = time.monotonic() + 600  # a guard against a test that never signals
    while not stop and time.monotonic() < deadline:
        time.sleep(0.05)
    for workdir in workdirs:
        write(workdir, "checkpoint.json", {{"step": 7}})
    sys.exit({STOPPED_EXIT_CODE})
for workdir in workdirs:
    write(workdir, "summary.json", {{"status": "finished", "step": 10,
                                     "metrics": {{"test": {{"seq_accuracy": 0.9}}}}}})
"""

SWEEP = '''
"""Stand-in runs for the job launchers."""
from transformer_jax.sweep import Sweep
from transformer_jax.sweep.slurm import SlurmResources


def get_sweep():
    return Sweep(
        config="configs/fake.py",
        variants={"base": {}, "flaky": {"fake.mode": "fail_once"}, "long": {"fake.mode": "wait"}},
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
        baseline="base",
    )


def get_slurm():
    return SlurmResources(partition="gpu", gpus=1, cpus=4, mem_gb=16, time_min=90,
                          account="nlp", constraint="a100", array_parallelism=2)
'''

SWEEP_FILE = "experiments/launch.py"
LOCAL = slurm.SlurmResources()  # submitit_local: no GPUs (CUDA_VISIBLE_DEVICES="")


@pytest.fixture
def launch_project(project):
    (project / "launch_main.py").write_text(TRAINER)
    (project / SWEEP_FILE).write_text(SWEEP)
    yield project
    # A failed test must not leave jobs training: end the processes these tests started.
    for path in project.glob("**/process.json"):
        info = json.loads(path.read_text())
        for pid in (info["pid"], info["ppid"]):
            # Only if the pid is still one of these processes (not reused by another program).
            with contextlib.suppress(OSError):
                if re.search(rb"launch_main|submitit", _cmdline(pid)):
                    os.kill(pid, signal.SIGKILL)
    for path in project.glob(f"**/{slurm.JOB_FILE}"):
        job = json.loads(path.read_text())
        if job["launcher"] == "submitit_local" and slurm._controller_alive(job["job_id"]):
            os.kill(int(job["job_id"]), signal.SIGKILL)


def submit(workdir, launcher="submitit_local", resources=LOCAL, seed_groups=False, **kwargs):
    """Submits the launch sweep; run by run unless `seed_groups`, so that each run has a job
    of its own to preempt, kill and resubmit."""
    return slurm.submit_sweep(
        load_sweep(SWEEP_FILE),
        SWEEP_FILE,
        str(workdir),
        launcher=launcher,
        slurm=resources,
        main_module="launch_main",
        command="python -m transformer_jax.sweep --launcher=" + launcher,
        seed_groups=seed_groups,
        **kwargs,
    )


def states(workdir):
    return {s.name: s for s in slurm.sweep_status(str(workdir))}


def wait_until(predicate, timeout_s=600):
    """The predicate's first true value; the timeout guards against a hang, not a speed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not true within {timeout_s} s: {predicate}")


def settled(workdir):
    """The states once no job is queued or running."""
    now = states(workdir)
    return now if all(s.state not in ("queued", "running") for s in now.values()) else None


def calls(workdir, run):
    return (workdir / run / "calls.txt").read_text().split()


def job(workdir, run):
    return json.loads((workdir / run / slurm.JOB_FILE).read_text())


def test_cli_submits_reports_status_and_retries_a_failure(launch_project):
    workdir = launch_project / "out"
    cmd = [sys.executable, "-m", "transformer_jax.sweep", f"--sweep={SWEEP_FILE}"]
    cmd += ["--workdir=out", "--main_module=launch_main", "--variants=base,flaky", "--seeds=0"]
    cmd += ["--launcher=submitit_local"]
    # The local executor's job controllers outlive the command: they must not inherit its
    # output, or a pipe (as here) stays open and the command is not done until its jobs are.
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "base/seed_0" in output and "--status shows progress" in output
    first = {run: job(workdir, run) for run in ("base/seed_0", "flaky/seed_0")}
    assert first["base/seed_0"]["launcher"] == "submitit_local"
    assert first["base/seed_0"]["job_id"] != first["flaky/seed_0"]["job_id"]
    assert not (workdir / "long").exists()  # not selected

    final = wait_until(lambda: settled(workdir))
    assert final["base/seed_0"].state == "finished"
    assert final["base/seed_0"].detail == "test/seq_accuracy=0.9"
    assert final["flaky/seed_0"].state == "failed"
    assert final["flaky/seed_0"].detail == "RuntimeError: boom"
    assert final["long/seed_1"].state == "pending"
    # The job failed too (the wrapper raises after recording failure.json).
    job_id = first["flaky/seed_0"]["job_id"]
    error = submitit.LocalJob(workdir / slurm.JOBS_DIR, job_id).exception()
    assert "run flaky/seed_0 failed: RuntimeError: boom" in str(error)

    bad = [*cmd[:-1], "--launcher=ssh"]
    done = subprocess.run(bad, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    assert "--launcher=ssh: unknown launcher; valid: local, slurm, submitit_local" in done.stderr

    status = [sys.executable, "-m", "transformer_jax.sweep", "--workdir=out", "--status"]
    done = subprocess.run(status, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["run", "state", "job", "submitted", "detail"]
    row = next(line.split() for line in lines if line.startswith("flaky/seed_0"))
    assert row[:3] == ["flaky/seed_0", "failed", job_id] and row[4:] == ["RuntimeError:", "boom"]
    assert lines[-1] == "1 finished, 1 failed, 4 pending"

    # Rerunning resubmits only the failed run; the finished one keeps its job.
    states_now = submit(workdir, variants=["base", "flaky"], seeds=[0])
    assert [s.name for s in states_now if s.state in ("queued", "running")] == ["flaky/seed_0"]
    retried = job(workdir, "flaky/seed_0")
    assert retried["job_id"] != job_id and retried["previous"][0]["job_id"] == job_id
    assert job(workdir, "base/seed_0") == first["base/seed_0"]
    final = wait_until(lambda: settled(workdir))
    assert final["flaky/seed_0"].state == "finished"
    assert calls(workdir, "base/seed_0") == ["None"] and calls(workdir, "flaky/seed_0") == [
        "None",
        "None",
    ]
    assert not (workdir / "flaky/seed_0/failure.json").exists()

    report = [sys.executable, "-m", "transformer_jax.sweep", "--workdir=out", "--report_only"]
    done = subprocess.run(report, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "| flaky | 0.900 (n=1)" in (workdir / "report.md").read_text()


def test_preempted_job_requeues_and_killed_job_resumes_after_resubmission(launch_project):
    workdir = launch_project / "out"
    submit(workdir, variants=["long"])
    started = {
        run: wait_until(lambda run=run: _read(workdir / run / "process.json"))
        for run in ("long/seed_0", "long/seed_1")
    }
    first = {run: job(workdir, run)["job_id"] for run in started}
    assert {s.state for n, s in states(workdir).items() if n.startswith("long")} == {"running"}
    # Submitting again leaves running jobs alone.
    submit(workdir, variants=["long"])
    assert {run: job(workdir, run)["job_id"] for run in started} == first
    # Slurm's USR2 reaches every process of the job; the trainer was started with it blocked.
    assert all(signal.SIGUSR2 in p["blocked"] for p in started.values())

    # Preemption or time limit of seed 0: the signal Slurm sends (USR2, to every process of
    # the job step). The job stops the trainer with a checkpoint (step 7) and is requeued.
    for pid in (started["long/seed_0"]["ppid"], started["long/seed_0"]["pid"]):
        os.kill(pid, signal.SIGUSR2)
    # Seed 1's job dies outright (node failure): controller, job process and trainer.
    killed = started["long/seed_1"]
    for pid in (int(first["long/seed_1"]), killed["ppid"], killed["pid"]):
        os.kill(pid, signal.SIGKILL)

    final = wait_until(lambda: settled(workdir))
    assert final["long/seed_0"].state == "finished"
    assert calls(workdir, "long/seed_0") == ["None", "7"]  # resumed from the saved checkpoint
    assert job(workdir, "long/seed_0")["job_id"] == first["long/seed_0"]  # requeued, same job
    log = (workdir / slurm.JOBS_DIR / f"{first['long/seed_0']}_0_log.err").read_text()
    assert "Requeued job" in log
    assert final["long/seed_1"].state == "interrupted"
    assert f"job {first['long/seed_1']} ended" in final["long/seed_1"].detail
    # The newest checkpoint the dead job left: 5, or 7 when the SIGTERM its parent's death sends
    # (PR_SET_PDEATHSIG) was handled before its own SIGKILL landed, which depends on the
    # machine's speed. The resubmission must resume from whichever it is.
    left = _read(workdir / "long/seed_1/checkpoint.json")["step"]
    assert left in (5, 7)

    submit(workdir, variants=["long"])
    assert job(workdir, "long/seed_1")["job_id"] != first["long/seed_1"]
    assert job(workdir, "long/seed_0")["job_id"] == first["long/seed_0"]  # finished: skipped
    final = wait_until(lambda: settled(workdir))
    assert final["long/seed_1"].state == "finished"
    assert calls(workdir, "long/seed_1") == ["None", str(left)]  # the newest checkpoint


def test_seed_group_is_one_job_that_requeues_and_resumes_every_seed(launch_project, monkeypatch):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)  # the test session's cache
    workdir = launch_project / "out"
    submit(workdir, variants=["long"], seed_groups=True)
    runs = ("long/seed_0", "long/seed_1")
    started = {
        run: wait_until(lambda run=run: _read(workdir / run / "process.json")) for run in runs
    }
    assert started["long/seed_0"] == started["long/seed_1"]  # one trainer for both seeds
    job_id = job(workdir, "long/seed_0")["job_id"]
    assert job(workdir, "long/seed_1")["job_id"] == job_id
    command = (workdir / "long/seed_1/command.txt").read_text()
    assert "# trained in the seed group long/seed_{0,1} by:" in command
    assert f"JAX_COMPILATION_CACHE_DIR={workdir / '.compile_cache'}" in command

    for pid in (started["long/seed_0"]["ppid"], started["long/seed_0"]["pid"]):
        os.kill(pid, signal.SIGUSR2)  # preemption: the group stops with a checkpoint
    final = wait_until(lambda: settled(workdir))
    for run in runs:
        assert final[run].state == "finished"
        assert calls(workdir, run) == ["None", "7"]  # both resumed by the requeued job
        assert job(workdir, run)["job_id"] == job_id


def _read(path):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


@pytest.fixture
def fake_cluster(launch_project, monkeypatch):
    """srun (submitit's test for a cluster), sbatch (job ids 77, 78, ...) and sacct (prints
    sacct.out) as scripts on PATH."""
    bin_dir = launch_project / "bin"
    bin_dir.mkdir()
    scripts = {
        "srun": "exit 0",
        "sbatch": 'n=$(cat "$0.next" 2>/dev/null || echo 77); echo $((n + 1)) > "$0.next"\n'
        'echo "Submitted batch job $n"',
        "sacct": 'cat "$(dirname "$0")/sacct.out"',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "sacct.out").write_text("JobID|State|NodeList\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_slurm_executor_gets_the_resources_and_sacct_states(launch_project, fake_cluster):
    workdir = launch_project / "out"
    flags = {field: None for field in slurm.RESOURCE_FIELDS}
    flags.update(gpus="2", setup=["module load cuda/12.4"])  # override the sweep file's
    resources = slurm.resources(SWEEP_FILE, flags)
    submit(workdir, launcher="slurm", resources=resources)

    script = (workdir / slurm.JOBS_DIR / "77_submission.sh").read_text()
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --gpus-per-node=2",  # the flag
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=16GB",
        "#SBATCH --time=90",
        "#SBATCH --account=nlp",
        "#SBATCH --constraint=a100",
        "#SBATCH --array=0-5%2",  # six runs, two at once
        "#SBATCH --signal=USR2@120",
        "#SBATCH --job-name=sweep_launch",
        "module load cuda/12.4",
    ):
        assert line in script.splitlines()
    invocation = json.loads((workdir / "sweep.json").read_text())["invocations"][-1]
    assert invocation["launcher"] == "slurm" and invocation["resources"]["gpus"] == 2
    runs = [f"{v}/seed_{s}" for v in ("base", "flaky", "long") for s in (0, 1)]
    for k, run in enumerate(runs):
        record = job(workdir, run)
        assert record["launcher"] == "slurm" and record["job_id"] == f"77_{k}"
        # The array task's pickle trains that run.
        pickle = workdir / slurm.JOBS_DIR / f"77_{k}_submitted.pkl"
        train_job = submitit.helpers.DelayedSubmission.load(pickle).function
        assert isinstance(train_job, slurm.TrainJob) and train_job.spec.name == run
        assert "--config.fake.mode=wait" in train_job.spec.argv or not run.startswith("long")

    (workdir / "base/seed_0/summary.json").write_text(json.dumps({"status": "finished", "step": 1}))
    (fake_cluster / "sacct.out").write_text(
        "JobID|State|NodeList\n77_0|COMPLETED|n1\n77_1|RUNNING|n1\n77_2|PENDING|None\n"
        "77_3|OUT_OF_MEMORY|n2\n77_4|CANCELLED by 0|n2\n"  # 77_5: not (yet) in sacct
    )
    now = states(workdir)
    assert [now[run].state for run in runs] == [
        "finished",
        "running",
        "queued",
        "failed",
        "interrupted",
        "unknown",
    ]
    assert now["long/seed_0"].detail.startswith("job 77_4 ended CANCELLED;")

    # Resubmission: only the failed and the interrupted run, as a new array.
    submit(workdir, launcher="slurm", resources=resources)
    assert "#SBATCH --array=0-1%2" in (workdir / slurm.JOBS_DIR / "78_submission.sh").read_text()
    assert [job(workdir, run)["job_id"] for run in runs] == [
        "77_0",
        "77_1",
        "77_2",
        "78_0",
        "78_1",
        "77_5",
    ]
    assert job(workdir, "flaky/seed_1")["previous"][0]["job_id"] == "77_3"

    # Unset resources are left to the cluster's defaults: no line for them.
    submit(launch_project / "defaults", launcher="slurm", resources=slurm.SlurmResources())
    script = (launch_project / "defaults" / slurm.JOBS_DIR / "79_submission.sh").read_text()
    for flag in ("partition", "gpus", "cpus", "mem", "account", "constraint"):
        assert f"#SBATCH --{flag}" not in script
    assert "#SBATCH --time=60" in script and "#SBATCH --array=0-5%6" in script


@pytest.mark.parametrize(
    "flags, error",
    [
        ({"gpus": "-1"}, "--slurm_gpus=-1 (or SlurmResources(gpus=...) in the sweep file): must"),
        ({"cpus": "four"}, "--slurm_cpus=four: must be an integer"),
        ({"mem_gb": "16G"}, "--slurm_mem_gb=16G: must be a number of GB (e.g. 16 or 7.5)"),
        ({"mem_gb": "0"}, "--slurm_mem_gb=0.0 (or SlurmResources(mem_gb=...) in the sweep"),
        ({"time_min": "0"}, "--slurm_time_min=0 (or SlurmResources(time_min=...) in the sweep"),
        ({"time_min": "2"}, "--slurm_signal_delay_s=120 (or SlurmResources(signal_delay_s=...)"),
        ({"partition": " "}, "--slurm_partition=' ' (or SlurmResources(partition=...) in the"),
        ({"array_parallelism": "0"}, "--slurm_array_parallelism=0 (or SlurmResources"),
        ({"nope": "1"}, "unknown resource 'nope'; valid: partition, gpus, cpus, mem_gb"),
    ],
)
def test_bad_resources_name_flag_value_and_what_is_valid(launch_project, flags, error):
    with pytest.raises(ValueError) as e:
        slurm.resources(SWEEP_FILE, flags)
    assert str(e.value).startswith(error)


def test_bad_launcher_inputs_fail_before_anything_is_written(launch_project, monkeypatch):
    bad = [
        (("ssh", 1, {}), "--launcher=ssh: unknown launcher; valid: local, slurm, submitit_local"),
        (("local", 1, {"partition": "gpu"}), "--slurm_partition=gpu needs a job launcher: add"),
        (("slurm", 4, {}), "--parallel=4 is for --launcher=local; with --launcher=slurm the"),
    ]
    for args, error in bad:
        with pytest.raises(ValueError, match=error):
            slurm.check_launcher(*args)
    assert slurm.check_launcher("slurm", 1, {"partition": "gpu", "setup": []}) == "slurm"
    (launch_project / "experiments/other.py").write_text(
        "from transformer_jax.sweep.slurm import SlurmResources\n"
        "def get_slurm():\n    return {'gpus': 1}\n"
    )
    with pytest.raises(ValueError, match=r"get_slurm\(\) in 'experiments/other.py' returned dict"):
        slurm.resources("experiments/other.py", {})
    assert slurm.resources(None, {}) == slurm.SlurmResources()

    # A workdir with a finished run: a refused submission leaves every file as it was.
    workdir = launch_project / "out"
    (workdir / "base/seed_0").mkdir(parents=True)
    (workdir / "base/seed_0/summary.json").write_text('{"status": "finished", "step": 1}')
    before = sorted(str(p) for p in workdir.rglob("*"))
    monkeypatch.setenv("PATH", str(launch_project))  # no srun
    with pytest.raises(ValueError, match="--launcher=slurm cannot submit here: no `srun` on PATH"):
        submit(workdir, launcher="slurm")
    assert sorted(str(p) for p in workdir.rglob("*")) == before


def test_run_state_precedence():
    from transformer_jax.sweep_dir import RunRecord

    def state(status, scheduler, job=True, failure=None):
        record = RunRecord("v", 0, "/w/v/seed_0", status, error=failure)
        record_job = {"job_id": "9_1", "folder": "/w/_submitit"} if job else None
        return slurm.run_state(record, record_job, scheduler)[0]

    # The run directory's final outcome wins over whatever the scheduler says.
    assert state("finished", "RUNNING") == "finished" and state("diverged", None) == "diverged"
    # A live job wins over an earlier failure (a retry in the queue).
    assert state("failed", "PENDING", failure="boom") == "queued"
    assert state("failed", "REQUEUED") == "queued" and state("incomplete", "RUNNING") == "running"
    assert state("failed", "COMPLETED", failure="boom") == "failed"
    assert state("missing", "NODE_FAIL") == "failed"
    assert state("incomplete", "PREEMPTED") == "interrupted"
    assert state("missing", "TIMEOUT") == "interrupted"
    assert state("incomplete", None, job=False) == "interrupted"
    assert state("missing", None, job=False) == "pending"
    assert state("missing", "UNKNOWN") == "unknown"


TINY_COPY = {
    "model.d_model": 32,
    "model.num_encoder_layers": 1,
    "model.num_decoder_layers": 1,
    "model.attention.num_heads": 2,
    "model.ffn.d_ff": 64,
    "data.num_train": 2000,
    "data.num_test": 64,
    "data.num_test_long": 64,
    "data.max_len": 8,
    "data.long_min_len": 9,
    "data.long_max_len": 12,
    "data.batch_size": 16,
    "train.steps": 60,
    "train.log_every": 10,
    "train.eval_every": 30,
    "train.checkpoint_every": 20,
    "train.warmup_steps": 5,
}


# transformer_jax.main whose training iterator, as it fetches its 12th batch, waits for the
# SIGTERM that the job sends the trainer when Slurm's warning signal comes: the signal lands
# mid-run at any machine speed (a run watched from outside could finish before it). It waits
# once: HELD marks the wait, and the requeued job's process trains straight through.
HELD_MAIN = """
import os, signal, sys, time
sys.path.insert(0, TESTS_PATH)
from hooked_iterator import run_main

HELD = HELD_PATH


def wait_for_sigterm(fetched, batch):
    if fetched == 12 and not os.path.exists(HELD):
        got, handler = [], signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, lambda *a: got.append(1) or handler(*a))
        open(HELD, "w").close()
        while not got:
            time.sleep(0.05)
        signal.signal(signal.SIGTERM, handler)
    return batch


run_main(wait_for_sigterm)
"""


@pytest.mark.slow
def test_real_trainer_preempted_in_a_job_saves_requeues_and_resumes(launch_project):
    """transformer_jax.main in a submitit_local job: Slurm's warning signal stops it with a
    checkpoint, the job is requeued and the run resumes from that step to the end."""
    repo = os.environ["PYTHONPATH"].split(os.pathsep)[-1]
    held = launch_project / "held"
    script = HELD_MAIN.replace("HELD_PATH", repr(str(held))).replace("TESTS_PATH", repr(TESTS))
    (launch_project / "held_main.py").write_text(script)
    variant = {**TINY_COPY, "data.data_dir": str(launch_project / "tfds")}
    (launch_project / "experiments/real.py").write_text(
        f'"""A tiny copy run."""\nfrom transformer_jax.sweep import Sweep\n'
        f"def get_sweep():\n    return Sweep(config={repo + '/configs/algorithmic.py'!r}, "
        f"config_arg='copy', variants={{'tiny': {variant!r}}}, seeds=(0,), "
        f"metrics=('test/seq_accuracy',), baseline='tiny')\n"
    )
    workdir = launch_project / "out"
    slurm.submit_sweep(
        load_sweep("experiments/real.py"),
        "experiments/real.py",
        str(workdir),
        launcher="submitit_local",
        slurm=LOCAL,
        main_module="held_main",
    )
    run = workdir / "tiny/seed_0"
    wait_until(held.exists, timeout_s=600)
    job_id = job(workdir, "tiny/seed_0")["job_id"]
    wrappers = _children(int(job_id))  # the controller's task: submitit's job process
    trainers = [c for w in wrappers for c in _children(w) if b"held_main" in _cmdline(c)]
    assert len(wrappers) == 1 and len(trainers) == 1
    for pid in (*wrappers, *trainers):
        os.kill(pid, signal.SIGUSR2)  # what Slurm does: every process of the job step
    final = wait_until(lambda: settled(workdir), timeout_s=600)
    assert final["tiny/seed_0"].state == "finished"
    log = (run / "run.log").read_text()
    # The 12th batch trains before the loop sees the stop: it stops at step 12.
    assert "Stopped by signal at step 12" in log and "Resumed" in log
    assert job(workdir, "tiny/seed_0")["job_id"] == job_id  # the same job, requeued


def _text(path):
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def test_a_run_whose_trainer_outlived_its_job_is_running_not_resubmitted(tmp_path):
    """Its job controller killed, the trainer trains on: holding the run's lock, it is seen."""
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from transformer_jax import run_dir; "
            f"lock = run_dir.lock_run({str(run)!r}); print('locked', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        record = sweep_dir.RunRecord("v", 0, str(run), "incomplete")
        state, detail = slurm.run_state(record, {"job_id": "41"}, "ENDED")
        assert state == "running" and f"process {holder.pid} still trains it" in detail
        assert "job 41 ended ENDED" in detail
    finally:
        holder.kill()
        holder.wait()
    assert slurm.run_state(record, {"job_id": "41"}, "ENDED")[0] == "interrupted"
