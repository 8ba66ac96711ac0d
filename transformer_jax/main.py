"""Command line: python -m transformer_jax.main --config=configs/algorithmic.py:copy --workdir=X

Override any field in the ml_collections style, e.g. --config.model.norm.kind=rmsnorm
--config.model.attention.scale=none --config.train.steps=500. Rerunning with the same workdir
resumes from its latest checkpoint.
"""

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from transformer_jax.commands import one_line_errors
from transformer_jax.run_dir import DIVERGED_EXIT_CODE, STOPPED_EXIT_CODE
from transformer_jax.train.numerics import NonFiniteError
from transformer_jax.train.trainer import train_and_evaluate

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics, summary).")
flags.mark_flags_as_required(["config", "workdir"])

# Exit status: 0 finished; 2 a user error or a checkpoint that could not be saved, e.g. on a full
# disk (one "main: error:" line, see commands.py; summary.json says "failed");
# DIVERGED_EXIT_CODE (3) a non-finite loss; STOPPED_EXIT_CODE (75) stopped by SIGTERM/SIGINT with
# a checkpoint saved, so rerunning resumes. Defined in run_dir, the trainer/sweep contract.


@one_line_errors("main")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO.
    try:
        summary = train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    except NonFiniteError as error:
        print(f"Diverged: {error}", file=sys.stderr)
        sys.exit(DIVERGED_EXIT_CODE)
    if summary.status == "stopped":
        sys.exit(STOPPED_EXIT_CODE)
    if summary.status == "finished":
        for split, metrics in summary.metrics.items():
            shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items() if "/" not in k)
            print(f"{split}: {shown}")


if __name__ == "__main__":
    app.run(main)
