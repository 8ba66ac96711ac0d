"""Starts the N processes of one multi-process run on this machine, as a pod slice runs one per
host: a local test of multi-host training, or one process per GPU of a workstation.

    python -m transformer_jax.launch_local --num_processes=2 --cpu_devices=4 -- \\
        --config=configs/algorithmic.py:copy --workdir=runs/copy_2x4

Process p runs `python -m MODULE ARGS` (ARGS: everything after `--`; MODULE: --module, the
trainer by default) with JAX_COORDINATOR_ADDRESS (a free port of this machine), JAX_NUM_PROCESSES
and JAX_PROCESS_ID=p, which the trainer hands to `jax.distributed.initialize`
(train/multihost.py). --cpu_devices=K gives each process K simulated CPU devices, as a TPU host
has its chips; --gpus_per_process=K gives process p the GPUs [p*K, (p+1)*K).

The processes share this terminal. SIGTERM and SIGINT to the launcher go to every process (the
trainer saves a checkpoint and stops). A process that fails leaves the others waiting in their
next collective, so once one exits with an error, or a signal came, the processes still running
get SIGTERM after --grace_s seconds and SIGKILL after as many more. Exit status: the status of
the first process to fail (128 + N for signal N), else 0.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

from transformer_jax.train.multihost import COORDINATOR_VAR, NUM_PROCESSES_VAR, PROCESS_ID_VAR

_POLL_S = 0.1


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(launcher options, the processes' arguments after `--`); errors name the flag."""
    ours, theirs = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :])
        if "--" in argv
        else (
            argv,
            [],
        )
    )
    parser = argparse.ArgumentParser(prog="python -m transformer_jax.launch_local")
    parser.add_argument("--num_processes", type=int, required=True, help="processes to start")
    devices = parser.add_mutually_exclusive_group()
    devices.add_argument("--cpu_devices", type=int, default=0, help="CPU devices per process")
    devices.add_argument("--gpus_per_process", type=int, default=0, help="GPUs per process")
    parser.add_argument("--module", default="transformer_jax.main", help="python -m MODULE")
    parser.add_argument("--grace_s", type=float, default=60.0, help="see the module docstring")
    args = parser.parse_args(ours)
    for name in ("num_processes", "cpu_devices", "gpus_per_process"):
        lowest = 1 if name == "num_processes" else 0
        if getattr(args, name) < lowest:
            parser.error(
                f"--{name}={getattr(args, name)} is invalid; valid: an integer >= {lowest}"
            )
    return args, theirs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def process_env(args: argparse.Namespace, process_id: int, address: str) -> dict[str, str]:
    """The environment of process `process_id`: its place in the run and its devices."""
    env = {
        **os.environ,
        COORDINATOR_VAR: address,
        NUM_PROCESSES_VAR: str(args.num_processes),
        PROCESS_ID_VAR: str(process_id),
    }
    if args.cpu_devices:
        flags = os.environ.get("XLA_FLAGS", "")
        env["JAX_PLATFORMS"] = "cpu"
        env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={args.cpu_devices}"
    if args.gpus_per_process:
        first = process_id * args.gpus_per_process
        ids = range(first, first + args.gpus_per_process)
        env["JAX_LOCAL_DEVICE_IDS"] = ",".join(map(str, ids))  # read by JAX itself
    return env


def launch(args: argparse.Namespace, command_args: list[str]) -> int:
    """Runs the processes to the end; the exit status described in the module docstring."""
    address = f"localhost:{free_port()}"
    command = [sys.executable, "-m", args.module, *command_args]
    processes = [
        subprocess.Popen(command, env=process_env(args, p, address))
        for p in range(args.num_processes)
    ]
    trouble_at = []  # when a signal came or a process failed: the grace periods start

    def forward(signum, frame):
        del frame
        trouble_at.append(time.monotonic())
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        escalated = 0  # 1 after SIGTERM, 2 after SIGKILL
        exit_order = []  # indices of the processes, as they are seen to exit
        while len(exit_order) < len(processes):
            exit_order += [
                i for i, p in enumerate(processes) if p.poll() is not None and i not in exit_order
            ]
            if not trouble_at and any(p.returncode for p in processes):
                trouble_at.append(time.monotonic())
            waited = time.monotonic() - trouble_at[0] if trouble_at else 0.0
            if escalated < 2 and waited > (escalated + 1) * args.grace_s:
                for process in processes:
                    if process.poll() is None:
                        process.kill() if escalated else process.terminate()
                escalated += 1
            time.sleep(_POLL_S)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    # The first failure is the cause; the others' statuses are its consequences.
    failed = [processes[i] for i in exit_order if processes[i].returncode]
    return _status(failed[0]) if failed else 0


def _status(process: subprocess.Popen) -> int:
    """The shell's convention: 128 + N for a process killed by signal N."""
    return 128 - process.returncode if process.returncode < 0 else process.returncode


def main(argv: list[str]) -> int:
    args, command_args = parse_args(argv)
    return launch(args, command_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
