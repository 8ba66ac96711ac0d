"""Several processes, one run: how they start and what they must agree on.

Start: one process per host (a TPU VM of a pod slice, a node of a Slurm job, or one of the local
processes of `python -m transformer_jax.launch_local`). A process joins a multi-process run when
the environment names its place in it, JAX_COORDINATOR_ADDRESS ("host:port" of process 0),
JAX_NUM_PROCESSES and JAX_PROCESS_ID, which are passed to `jax.distributed.initialize` (JAX
itself reads only the first, so without this a bare `initialize()` ignores the others); or when
`train.distributed = True` without them, which leaves the discovery to JAX (Cloud TPU metadata,
Slurm's variables, Open MPI). On CPUs the processes talk through gloo collectives, JAX's default.

Agree: every process runs the same loop on its rows of each global batch (train/parallel.py).
Whatever is computed on the devices (losses, eval sums) comes back identical on every process,
so a NaN stops all of them at the same step. What only the host sees, a signal, is shared with
`any_process` before the loop acts on it, every step (about 2 ms on CPU gloo): checkpoint
saves are collective, so a process that saved and left alone would leave the others waiting
forever in their next step, with no checkpoint of the signalled step. Files outside the
checkpoints (metrics.jsonl, TensorBoard events, config.json, tokenizer, summary.json, the run
lock) are written by process 0 alone (`is_primary`); orbax already writes each checkpoint
file once.
"""

import os
from collections.abc import Mapping

import jax
import numpy as np
from jax.experimental import multihost_utils

from transformer_jax.config import TrainConfig

COORDINATOR_VAR = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES_VAR = "JAX_NUM_PROCESSES"
PROCESS_ID_VAR = "JAX_PROCESS_ID"


def launch_args(environ: Mapping[str, str]) -> dict | None:
    """`jax.distributed.initialize` keyword arguments from `environ`, or None when it does not
    set JAX_NUM_PROCESSES or JAX_PROCESS_ID (a single process, or discovery left to JAX).

    Raises ValueError naming the variable that is missing or invalid.
    """
    if NUM_PROCESSES_VAR not in environ and PROCESS_ID_VAR not in environ:
        return None
    missing = [
        v for v in (COORDINATOR_VAR, NUM_PROCESSES_VAR, PROCESS_ID_VAR) if not environ.get(v)
    ]
    if missing:
        raise ValueError(
            f"a multi-process launch sets {COORDINATOR_VAR}, {NUM_PROCESSES_VAR} and "
            f"{PROCESS_ID_VAR} together; missing: {', '.join(missing)}"
        )
    num_processes = _int_var(NUM_PROCESSES_VAR, environ[NUM_PROCESSES_VAR], "an integer >= 1")
    if num_processes < 1:
        raise ValueError(f"{NUM_PROCESSES_VAR}={num_processes} is invalid; valid: an integer >= 1")
    valid_ids = f"an integer in [0, {num_processes - 1}]"
    process_id = _int_var(PROCESS_ID_VAR, environ[PROCESS_ID_VAR], valid_ids)
    if not 0 <= process_id < num_processes:
        raise ValueError(f"{PROCESS_ID_VAR}={process_id} is invalid; valid: {valid_ids}")
    address = environ[COORDINATOR_VAR]
    if ":" not in address:
        raise ValueError(f"{COORDINATOR_VAR}={address!r} is invalid; valid: 'host:port'")
    return {
        "coordinator_address": address,
        "num_processes": num_processes,
        "process_id": process_id,
    }


def _int_var(name: str, value: str, valid: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is invalid; valid: {valid}") from None


def initialize(train: TrainConfig, environ: Mapping[str, str] | None = None) -> None:
    """Joins the multi-process run that `environ` (default: os.environ) or `train.distributed`
    asks for; nothing for a single process. Call before any JAX computation."""
    args = launch_args(os.environ if environ is None else environ)
    if args is None and not train.distributed:
        return
    if jax.distributed.is_initialized():  # E.g. a second run in one process.
        return
    jax.distributed.initialize(**(args or {}))


def is_primary() -> bool:
    """Whether this process writes the run directory's files (process 0)."""
    return jax.process_index() == 0


def any_process(flag: bool) -> bool:
    """True on every process when `flag` is True on any of them; a collective: every process
    must call it at the same point of the loop."""
    if jax.process_count() == 1:
        return flag
    return bool(np.any(multihost_utils.process_allgather(np.asarray(flag, np.int32))))
