"""`RunTracking`: what one run shows to TensorBoard's HParams dashboard and Weights & Biases.

The metrics logger (train/logger.py) drives it, in the process that writes the run directory
(process 0 of a multi-process run), for a solo run and for each seed of a seed group alike:
`start` when the logger opens, before anything compiles (the HParams session and, with
train.wandb_project, the W&B run: a W&B that cannot start stops the run then), `log` with every
metrics line, `end` when summary.json is written, `close` at the end of the process.

A run's hparams: its seed, plus what the sweep that launched it wrote to hparams.json (variant,
cell factors, overridden fields; sweep/hparams.py). A resumed run keeps its session's start time.
"""

import os
import time
from collections.abc import Mapping
from typing import Any

from transformer_jax.run_dir import (
    DIVERGED_EXIT_CODE,
    HPARAMS_FILE,
    STOPPED_EXIT_CODE,
    RunSummary,
    read_json,
    seed_dir,
)
from transformer_jax.tracking import hparams as hparams_lib

_EXIT_CODES = {"finished": 0, "diverged": DIVERGED_EXIT_CODE, "stopped": STOPPED_EXIT_CODE}


def run_names(workdir: str | os.PathLike, sweep_run: Mapping[str, Any]) -> tuple[str, str | None]:
    """(name, group) of a run for W&B: a sweep's run is <variant>/seed_<s> in the group
    <sweep>/<variant> (with nuisance, <variant>/<setting>/seed_<s> in <sweep>/<variant>/<setting>);
    a seed of a seed group (WORKDIR/seed_<s>) <WORKDIR>/seed_<s> in the group <WORKDIR>; any other
    run its directory's name, in no group."""
    workdir = os.path.abspath(os.fspath(workdir))
    parent, base = os.path.split(workdir)
    hparams = sweep_run.get("hparams", {})
    if "variant" in hparams:
        variant = "/".join(str(hparams[k]) for k in ("variant", "setting") if k in hparams)
        return f"{variant}/{base}", f"{sweep_run.get('sweep', '')}/{variant}"
    parent_name = os.path.basename(parent)
    seed = base.removeprefix("seed_")
    if seed.isdigit() and seed_dir(parent, int(seed)) == workdir:
        return f"{parent_name}/{base}", parent_name
    return base, None


class RunTracking:
    """The HParams session and the optional W&B run of the run directory `workdir`, trained with
    the resolved config `config` (config.json's)."""

    def __init__(self, workdir: str | os.PathLike, config: Mapping[str, Any]):
        self.workdir = os.fspath(workdir)
        self.config = config
        sweep_run = read_json(os.path.join(self.workdir, HPARAMS_FILE))
        self.sweep_run = sweep_run if isinstance(sweep_run, dict) else {}
        self.hparams = {**self.sweep_run.get("hparams", {}), "seed": config.get("seed")}
        # The seeds of a variant (of a seed group) are one group, in TensorBoard as in W&B.
        self.group = run_names(self.workdir, self.sweep_run)[1]
        self.project = config.get("train", {}).get("wandb_project", "")
        self._start_time: float | None = None
        self._wandb = None

    def start(self) -> None:
        # A resumed run: still one session, started when the run first did.
        previous = hparams_lib.read_session_start(self.workdir)
        self._start_time = previous.start_time_secs if previous is not None else time.time()
        self._write_session()
        if self.project:
            # Imported here: a run without W&B never imports it (nor needs it installed).
            from transformer_jax.tracking.wandb_run import WandbRun

            name, _ = run_names(self.workdir, self.sweep_run)
            tags = tuple(t for t in (self.sweep_run.get("sweep"),) if t)
            self._wandb = WandbRun(
                self.workdir,
                project=self.project,
                config=self.config,
                name=name,
                group=self.group,
                tags=tags,
            )

    def _write_session(self, **end) -> None:
        hparams_lib.write_session(
            self.workdir, self.hparams, start_time=self._start_time, group=self.group, **end
        )

    def log(self, step: int, split: str, values: Mapping[str, float]) -> None:
        if self._wandb is not None:
            self._wandb.log(step, split, values)

    def end(self, summary: RunSummary) -> None:
        """The run ended (summary.json was just written): the session gets its status and final
        metrics, the W&B run its summary, and ends."""
        self._write_session(
            status=summary.status,
            step=summary.step,
            metrics=hparams_lib.flat_metrics(summary.metrics),
        )
        if self._wandb is not None:
            self._wandb.finish(summary.to_json(), _EXIT_CODES.get(summary.status, 1))
            self._wandb = None

    def close(self) -> None:
        """The process ends without a summary (stopped by a signal, or crashed): the W&B run
        ends as not finished; rerunning resumes it."""
        if self._wandb is not None:
            self._wandb.finish(None, STOPPED_EXIT_CODE)
            self._wandb = None
