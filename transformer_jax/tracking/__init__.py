"""Runs where researchers compare them interactively: TensorBoard's HParams dashboard and, with
train.wandb_project, Weights & Biases.

Modules:
  hparams    a run directory's HParams session (one event file, replaced on every write).
  run        RunTracking: the session and W&B run of one run, driven by the metrics logger.
  wandb_run  the W&B run of a run directory (imported only when train.wandb_project is set).
"""
