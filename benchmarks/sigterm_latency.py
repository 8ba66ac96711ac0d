"""How long a training run takes to honour SIGTERM: the signal, the checkpoint, the exit.

  python -m benchmarks.sigterm_latency --config=configs/multi30k.py \
      --override=--config.data.manual_dir=/path/to/multi30k/raw
  python -m benchmarks.sigterm_latency --config=configs/multi30k.py --log_every=1000 \
      --after_s=150 --override=--config.train.checkpoint_every=1000 \
      --override=--config.train.eval_every=1000 \
      --override=--config.data.manual_dir=/path/to/multi30k/raw

A preemptible VM gives about 30 seconds between SIGTERM and SIGKILL. This starts `python -m
transformer_jax.main` on the config in a temporary directory and sends SIGTERM either
--into_window_s seconds after its first logged training window (read from its metrics.jsonl), so
that the signal lands in the middle of a logging window, or, with --after_s, that many seconds
after launch (for a log_every so long that no window ends). It prints the signal-to-exit time,
the exit status (75: stopped with a checkpoint of the stopped step), the step the run stopped at
and the checkpoints in the run directory. The loop runs a bounded number of steps ahead of the
device (train/loop.py), so the time should be a few step times plus one save at any log_every.
"""

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from absl import app, flags

_CONFIG = flags.DEFINE_string("config", "configs/multi30k.py", "The run's config file[:arg].")
_LOG_EVERY = flags.DEFINE_integer("log_every", 0, "train.log_every; 0 keeps the config's.")
_INTO_WINDOW_S = flags.DEFINE_float(
    "into_window_s", 20.0, "Seconds after the first logged window's end to send SIGTERM."
)
_AFTER_S = flags.DEFINE_float(
    "after_s", 0.0, "If set, seconds after launch to send SIGTERM (instead of a window's end)."
)
_OVERRIDE = flags.DEFINE_multi_string("override", [], "Extra flags for transformer_jax.main.")
_POLL_S = 0.2


def logged_steps(workdir: Path) -> list[int]:
    """Steps of the train lines in metrics.jsonl so far (a line being written is skipped)."""
    path = workdir / "metrics.jsonl"
    steps = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("split") == "train":
                steps.append(record["step"])
    return steps


def checkpoint_steps(workdir: Path) -> list[int]:
    """Steps of the checkpoints in the run directory (orbax names them by step)."""
    root = workdir / "checkpoints"
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit()) if root.exists() else []


def measure(
    config: str, log_every: int, into_window_s: float, after_s: float, overrides: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp) / "run"
        command = [
            sys.executable,
            "-m",
            "transformer_jax.main",
            f"--config={config}",
            f"--workdir={workdir}",
            *overrides,
        ]
        if log_every:
            command.append(f"--config.train.log_every={log_every}")
        print("run:", " ".join(command[1:]), flush=True)
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        start = time.perf_counter()
        if after_s:
            while process.poll() is None and time.perf_counter() - start < after_s:
                time.sleep(_POLL_S)
            trigger = f"SIGTERM {after_s:.0f} s after launch"
        else:
            while process.poll() is None and not logged_steps(workdir):
                time.sleep(_POLL_S)
            steps = logged_steps(workdir)
            trigger = (
                f"first logged step {steps[0] if steps else None} at "
                f"{time.perf_counter() - start:.1f} s after launch; SIGTERM "
                f"{into_window_s:.0f} s later"
            )
            time.sleep(into_window_s)
        if process.poll() is not None:
            print(process.stdout.read())
            raise SystemExit("the run ended before the signal")
        sent = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate()
        exited = time.perf_counter()
        stopped = [line for line in output.splitlines() if "Stopped by signal" in line]
        print(trigger)
        print(f"exit status {process.returncode}; {stopped[0] if stopped else 'no stop line'}")
        print(
            f"checkpoints at steps {checkpoint_steps(workdir)}; logged train steps "
            f"{logged_steps(workdir)}"
        )
        print(f"SIGTERM to exit: {exited - sent:.1f} s")
        if process.returncode != 75:
            print(output[-4000:])


def main(argv):
    del argv
    measure(_CONFIG.value, _LOG_EVERY.value, _INTO_WINDOW_S.value, _AFTER_S.value, _OVERRIDE.value)


if __name__ == "__main__":
    app.run(main)
