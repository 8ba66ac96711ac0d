"""One process of a multi-process test run (tests/train/test_multihost.py), started by
`python -m transformer_jax.launch_local --module=multihost_cases -- CASE WORKDIR OPTIONS_JSON`
(or alone, for the single-process reference). Cases:

  train  trains train_fixtures.tiny_config (OPTIONS "data_dir", "steps" and "train" fields) in
         WORKDIR, prints "process P: STATUS at step S" and exits as transformer_jax.main does
         (0, DIVERGED_EXIT_CODE, STOPPED_EXIT_CODE).
         OPTIONS "fault": {"kind", "at", "process"} disturbs process "process" (every process
         when null) as it fetches its "at"-th training batch: "sigterm" sends it SIGTERM (that
         step still trains), "nan" makes the example weight of its last row NaN (a row only the
         last process trains on), "kill" SIGKILLs it once the checkpoint of step "after" is on
         disk, as a preempted host dies.
  rows   fetches OPTIONS "steps" training batches; process 0 writes WORKDIR/rows.npz with the
         rows every process keeps of each, stacked in process order ("<key>_<step>").
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import jax
import numpy as np
from hooked_iterator import hook_train_iterators
from jax.experimental import multihost_utils
from train_fixtures import tiny_config

from transformer_jax import data, run_dir
from transformer_jax.config import TrainConfig
from transformer_jax.train import multihost, parallel
from transformer_jax.train.numerics import NonFiniteError
from transformer_jax.train.trainer import train_and_evaluate


def fault_hook(fault: dict, workdir: Path):
    """A hooked_iterator hook doing OPTIONS "fault" (see the module docstring)."""

    def on_batch(fetched, batch):
        if fetched != fault["at"]:
            return batch
        kind = fault["kind"]
        if kind == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        elif kind == "nan":
            batch["example_weights"] = batch["example_weights"].copy()
            batch["example_weights"][-1] = np.nan
        elif kind == "kill":
            saved = workdir / run_dir.CHECKPOINT_DIR / str(fault["after"])
            while not saved.is_dir():
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        return batch

    return on_batch


def config_of(options: dict):
    config = tiny_config(options["data_dir"], steps_=options.get("steps", 20))
    cadence = {"log_every": 5, "eval_every": 10, "checkpoint_every": 10, "generate_eval": False}
    # SGD, not Adam: the attention key biases have an exactly zero gradient (softmax ignores a
    # shift), which Adam would turn from rounding noise into steps of the learning rate's size.
    sgd = {"optimizer": "sgd", "schedule": "constant", "warmup_steps": 0, "learning_rate": 0.5}
    config.train.update({**cadence, **sgd, **options.get("train", {})})
    config.data.num_test_long = 0  # One eval split: less to compile.
    return config


def case_train(workdir: Path, options: dict) -> int:
    multihost.initialize(TrainConfig())  # Before the fault below asks for the process index.
    fault = options.get("fault")
    if fault and fault.get("process") in (None, jax.process_index()):
        hook_train_iterators(fault_hook(fault, workdir))
    try:
        summary = train_and_evaluate(config_of(options), str(workdir))
    except NonFiniteError as error:
        summary = run_dir.RunSummary(status="diverged", step=error.step)
    print(f"process {jax.process_index()}: {summary.status} at step {summary.step}", flush=True)
    codes = {"diverged": run_dir.DIVERGED_EXIT_CODE, "stopped": run_dir.STOPPED_EXIT_CODE}
    return codes.get(summary.status, 0)


def case_rows(workdir: Path, options: dict) -> int:
    multihost.initialize(TrainConfig())
    config = config_of(options)
    dataset = data.load_dataset(config.data)
    batches = dataset.train_iterator(seed=config.seed, batch_size=config.data.batch_size)
    gathered = {}
    for step in range(options["steps"]):
        local = parallel.process_slice(next(batches))
        for key, rows in local.items():
            # (processes, rows per process, ...): what each process keeps, in process order.
            gathered[f"{key}_{step}"] = multihost_utils.process_allgather(rows)
    if multihost.is_primary():
        np.savez(workdir / "rows.npz", **gathered)
    return 0


if __name__ == "__main__":
    name, directory, options_json = sys.argv[1:]
    cases = {"train": case_train, "rows": case_rows}
    sys.exit(cases[name](Path(directory), json.loads(options_json)))
