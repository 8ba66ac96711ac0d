"""Writers of synthetic run directories as transformer_jax/run_dir.py specifies them."""

import json
import os

from transformer_jax.sweep import Sweep


def write_run(
    workdir,
    variant: str,
    seed: int,
    status: str,
    metrics: dict | None = None,
    losses=(2.0, 1.0, 0.5),
    num_params: int = 12345,
    tokens_per_sec: float = 1000.0,
    wall_time_s: float = 10.0,
    git_commit: str = "abc123",
):
    """status: finished | diverged (summary.json), failed (failure.json), incomplete (neither)."""
    path = os.path.join(workdir, variant, f"seed_{seed}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"seed": seed, "model": {"d_model": 32}, "git_commit": git_commit}, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for i, loss in enumerate(losses):
            event = {"step": 10 * i, "split": "train", "time": float(i), "loss": loss}
            event.update(learning_rate=1e-3, grad_norm=1.0, tokens_per_sec=tokens_per_sec)
            f.write(json.dumps(event) + "\n")
        for i in range(len(losses)):  # an evaluation at every logged step
            for split, values in (metrics or {}).items():
                event = {"step": 10 * i, "split": split, "time": float(i), **values}
                f.write(json.dumps(event) + "\n")
    if status in ("finished", "diverged"):
        summary = {
            "status": status,
            "step": 10 * (len(losses) - 1),
            "metrics": metrics or {},
            "num_params": num_params,
            "tokens_per_sec": tokens_per_sec,
            "wall_time_s": wall_time_s,
            "error": "loss is nan at step 20" if status == "diverged" else None,
        }
        with open(os.path.join(path, "summary.json"), "w") as f:
            json.dump(summary, f)
    if status in ("failed", "diverged"):
        failure = {
            "status": status,
            "returncode": 1 if status == "failed" else 3,
            "error": "RuntimeError: boom",
            "stderr_tail": "Traceback (most recent call last):\n  ...\nRuntimeError: boom\n",
        }
        with open(os.path.join(path, "failure.json"), "w") as f:
            json.dump(failure, f)
    return path


def write_sweep_json(workdir, sweep: Sweep, file: str = "experiments/demo.py"):
    """sweep.json as the runner writes it at start."""
    os.makedirs(workdir, exist_ok=True)
    resolved = {
        "file": file,
        **sweep.to_dict(),
        "config_spec": sweep.config_spec,
        "quick": False,
        "main_module": "transformer_jax.main",
        "cwd": "/repo",
        "invocations": [
            {
                "command": f"python -m transformer_jax.sweep --sweep={file} --workdir={workdir}",
                "date": "2025-01-01T00:00:00+00:00",
                "git_commit": "abc123",
                "machine": {
                    "platform": "cpu",
                    "device_kind": "cpu",
                    "device_count": 1,
                    "cpu_count": 2,
                    "jax_version": "0.10.2",
                    "os": "Linux",
                    "hostname": "box",
                },
            }
        ],
    }
    with open(os.path.join(workdir, "sweep.json"), "w") as f:
        json.dump(resolved, f)
