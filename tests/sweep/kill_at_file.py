"""Runs a command in a process group of its own until a file appears, then kills the group with
SIGKILL: an interruption at a point the code under test reaches, not after a sleep."""

import os
import signal
import subprocess
import time


def kill_when_file_appears(command, env, marker, timeout_s=120.0) -> None:
    """Starts `command`, waits for `marker` to exist (asserting it did), kill -9s its group."""
    proc = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout_s
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), f"{marker} never appeared"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
