"""Ablation sweeps: variants of a base config times seeds, trained as resumable subprocesses.

    python -m transformer_jax.sweep --sweep=experiments/attention_scale.py --workdir=runs/scale

Modules:
  factors   Factor and SplitFactor: a sweep's variants as the cells of a grid of factors.
  nuisance  nuisance factors (learning rate, warmup): tuned per variant, chosen on validation.
  spec      the Sweep definition a sweep file returns; loading it and checking its overrides.
  launcher  one run as a subprocess: command.txt, run.log, CPU pinning, the workdir lock and
            failure.json.
  runner    the runs of a sweep, resumed where a previous launch stopped; sweep.json; the report.
  slurm     the runs as Slurm jobs through submitit (--launcher=slurm), job.json, --status.
  __main__  the command line.
"""

import importlib

from transformer_jax.sweep.factors import Factor, SplitFactor
from transformer_jax.sweep.spec import (
    OverrideValue,
    Sweep,
    check_overrides,
    format_override,
    load_sweep,
)

__all__ = [
    "Factor",
    "OverrideValue",
    "SplitFactor",
    "Sweep",
    "check_overrides",
    "format_override",
    "load_sweep",
    "plan",
    "run_sweep",
    "update_sweep_json",
]

# The runner writes the report and the report reads spec, so importing the runner here would make
# `import transformer_jax.report.report` circular: its names are loaded on first use.
_RUNNER_NAMES = ("plan", "run_sweep", "update_sweep_json")


def __getattr__(name: str):
    if name in _RUNNER_NAMES:
        return getattr(importlib.import_module("transformer_jax.sweep.runner"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
