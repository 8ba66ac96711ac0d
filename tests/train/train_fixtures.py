"""The small training run that the trainer tests share, and how they read its metrics."""

import json
from pathlib import Path

from transformer_jax import defaults


def tiny_config(data_dir, steps_=60, **train):
    config = defaults.base_config("copy")
    config.model.update(d_model=32, num_encoder_layers=1, num_decoder_layers=1, dropout_rate=0.1)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 64
    config.data.update(
        data_dir=str(data_dir),
        num_train=2000,
        num_test=64,
        num_test_long=64,
        max_len=8,
        long_min_len=9,
        long_max_len=12,
        batch_size=16,
    )
    train = {"log_every": 10, "eval_every": 30, "checkpoint_every": 20, "warmup_steps": 5, **train}
    config.train.update(steps=steps_, **train)
    return config


def read_metrics(workdir):
    lines = [
        json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()
    ]
    for line in lines:
        line.pop("time"), line.pop("tokens_per_sec", None)
    return lines


def dotted(tree: dict, prefix: str = ""):
    """(dotted path, value) for every leaf of a nested config dict: the command-line overrides
    that give the config."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from dotted(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
