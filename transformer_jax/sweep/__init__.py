"""Ablation sweeps: variants of a base config times seeds, trained as resumable subprocesses.

    python -m transformer_jax.sweep --sweep=experiments/attention_scale.py --workdir=runs/scale

Modules:
  factors   Factor and SplitFactor: a sweep's variants as the cells of a grid of factors.
  nuisance  nuisance factors (learning rate, warmup): tuned per variant, chosen on validation.
  selection the choice of each variant's setting, shared by the runner (confirmation runs) and
            the report.
  code_version  the commit the runs are launched at; a tree with uncommitted code is refused.
  spec      the Sweep definition a sweep file returns; loading it and checking its overrides.
  launcher  one run as a subprocess: command.txt, run.log, CPU pinning, the workdir lock and
            failure.json.
  runner    the runs of a sweep, resumed where a previous launch stopped; recorded in sweep.json.
  slurm     the runs as Slurm jobs through submitit (--launcher=slurm), job.json, --status.
  __main__  `python -m transformer_jax.sweep`: hands over to transformer_jax/sweep_cli.py, the
            command line (runs or submits the sweep, then writes its report), which sits above
            this package and transformer_jax/report.

The sweep directory's files (sweep.json, the run directories) are read and written through
transformer_jax/sweep_dir.py, below both this package and transformer_jax/report, which reads
the sweep definition (spec, factors) but nothing that runs it.
"""

from transformer_jax.sweep.factors import Factor, SplitFactor
from transformer_jax.sweep.runner import plan, run_sweep
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
]
