"""The small training run that the trainer tests share, and how they read its metrics."""

import json
from pathlib import Path

from tiny_configs import tiny_copy_config

from transformer_jax.config.eval_blocks import upgrade_train_fields


def tiny_config(data_dir, steps_=60, **train):
    """The shared tiny copy run (tiny_configs.tiny_copy_config) with `train` fields."""
    return tiny_copy_config(data_dir, steps_, **train)


def read_metrics(workdir):
    lines = [
        json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()
    ]
    for line in lines:
        line.pop("time"), line.pop("tokens_per_sec", None)
    return lines


def dotted(tree: dict, prefix: str = ""):
    """(dotted path, value) for every leaf of a nested config dict: the command-line overrides
    that give the config. A train field that moved into an evaluator block (set by a test as
    before blocks) is written under its new name; a None leaf (an evaluator block's `every`:
    train.eval_every) is the default and cannot be written on the command line: it is left out."""
    for key, value in (tree if prefix else upgrade_train_fields(tree)).items():
        if isinstance(value, dict):
            yield from dotted(value, f"{prefix}{key}.")
        elif value is not None:
            yield f"{prefix}{key}", value
