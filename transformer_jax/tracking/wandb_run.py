"""A training run as a Weights & Biases run (train.wandb_project; imported only when it is set).

One W&B run per training run: its config is the resolved config (config.json's), its history the
metrics as logged (metrics.jsonl's lines, "split/metric" at their step), its summary summary.json
(the final metrics under the logged names). The W&B run id is stored in the run directory
(run_dir.WANDB_FILE) before the W&B run starts, so a resumed run, in a new process, continues the
same W&B run. `WANDB_MODE=offline` writes the W&B run under RUN/wandb/ with no network and no
account; `wandb sync RUN/wandb/offline-run-*` uploads it later.

Steps: W&B keeps one history row per step and ignores a step older than its last one. A resumed
run logs again the steps between its checkpoint and the crash, which the killed process may have
sent already; they equal those (a resume reproduces an uninterrupted run), so the ones W&B
ignores are duplicates.
"""

import os
import secrets
from collections.abc import Mapping
from typing import Any

import wandb

from transformer_jax.run_dir import WANDB_FILE, read_json, write_json


class WandbRun:
    """The W&B run of one run directory."""

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        project: str,
        config: Mapping[str, Any],
        name: str,
        group: str | None,
        tags: tuple[str, ...] = (),
    ):
        workdir = os.fspath(workdir)
        path = os.path.join(workdir, WANDB_FILE)
        stored = read_json(path)
        run_id = stored.get("id") if isinstance(stored, dict) else None
        if not run_id:
            run_id = secrets.token_hex(4)  # W&B's form: 8 lower-case letters or digits
            write_json(path, {"id": run_id, "project": project})
        self.id = run_id
        try:
            self._run = wandb.init(
                project=project,
                id=run_id,
                resume="allow",
                dir=workdir,
                config=dict(config),
                name=name,
                group=group,
                tags=list(tags),
                # A seed group trains several runs in one process, each its own W&B run.
                reinit="create_new",
                # The run's config may change on a resume (train.steps, learning_rate).
                allow_val_change=True,
                settings=wandb.Settings(console="off", x_disable_stats=True),
            )
        except wandb.errors.Error as error:
            raise ValueError(
                f"train.wandb_project={project!r}: W&B could not start ({error}); log in with "
                "`wandb login`, or log offline with WANDB_MODE=offline"
            ) from error

    def log(self, step: int, split: str, values: Mapping[str, float]) -> None:
        self._run.log({f"{split}/{name}": value for name, value in values.items()}, step=step)

    def finish(self, summary: Mapping[str, Any] | None, exit_code: int) -> None:
        """Sets the summary (summary.json's fields, its metrics as "split/metric") and ends."""
        if summary is not None:
            fields = {k: v for k, v in summary.items() if k != "metrics" and v is not None}
            for split, values in summary.get("metrics", {}).items():
                fields.update({f"{split}/{name}": value for name, value in values.items()})
            self._run.summary.update(fields)
        self._run.finish(exit_code=exit_code)
