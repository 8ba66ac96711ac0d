"""The base experiment config every file in configs/ starts from, and `quick` shrinking.

A config has four parts: `seed`, `model` (the fields of `ModelConfig`, by concern), `data` (the
dataset's documented fields, see `transformer_jax.data.registry`) and `train` (the fields of
`TrainConfig`). The typed dataclasses hold every default; the ConfigDicts here are made from
them, so that config files and the command line override the same names
(`--config.model.norm.kind=dyt`, `--config.train.steps=500`).
"""

import ml_collections
from ml_collections import config_dict

from transformer_jax import data
from transformer_jax import fields as F
from transformer_jax.config import ModelConfig, TrainConfig, UniversalConfig, ViTConfig
from transformer_jax.config.eval_blocks import default_evaluators

FROM_DATA = -1  # model fields filled from the dataset: vocabulary, lengths, image shape


def model_config(**overrides) -> ml_collections.ConfigDict:
    """`ModelConfig`'s defaults as a nested ConfigDict, `overrides` as dotted paths or
    top-level fields. vocab_size, positional.max_len and the vit's image shape come from the
    data (-1); `universal.enabled=True` switches the Universal Transformer on."""
    fields = F.to_dict(ModelConfig())
    fields["vocab_size"] = FROM_DATA
    fields["positional"]["max_len"] = FROM_DATA
    fields["universal"] = {"enabled": False, **F.to_dict(UniversalConfig())}
    vit = F.to_dict(ViTConfig())
    fields["vit"] = {**vit, "image_size": FROM_DATA, "num_channels": FROM_DATA}
    config = ml_collections.ConfigDict(fields)
    for path, value in overrides.items():
        _set(config, path, value, "model")
    return config


def train_config(**overrides) -> ml_collections.ConfigDict:
    """`TrainConfig`'s defaults as a ConfigDict. Each evaluator block's `every` is an int
    placeholder (None: train.eval_every), so the command line can set it."""
    fields = F.to_dict(TrainConfig())
    fields["evaluators"] = default_evaluators()
    config = ml_collections.ConfigDict(fields)
    for block in config.evaluators.values():
        block.every = config_dict.placeholder(int)
    for name, value in overrides.items():
        _set(config, name, value, "train")
    return config


def _set(config: ml_collections.ConfigDict, path: str, value, prefix: str) -> None:
    *parents, leaf = path.split(".")
    for name in parents:
        if name not in config or not isinstance(config[name], ml_collections.ConfigDict):
            raise ValueError(f"{prefix}.{path}: {prefix}.{name} is not a sub-config")
        config, prefix = config[name], f"{prefix}.{name}"
    if leaf not in config:
        raise ValueError(
            f"unknown config field {prefix}.{leaf}; valid fields of {prefix}: {sorted(config)}"
        )
    config[leaf] = value


def base_config(dataset: str) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.seed = 0  # parameters, dropout and data order all derive from it
    config.model = model_config()
    config.data = data.default_data_config(dataset)
    config.train = train_config()
    return config


def shrink(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`quick`: a smaller, shorter version of any config, for a laptop smoke run in ~a minute."""
    m, t = config.model, config.train
    m.d_model = min(m.d_model, 64)
    m.attention.num_heads = min(m.attention.num_heads, 4)
    if m.attention.num_kv_heads:
        m.attention.num_kv_heads = min(m.attention.num_kv_heads, m.attention.num_heads)
    m.ffn.d_ff = min(m.ffn.d_ff, 128)
    m.num_encoder_layers = min(m.num_encoder_layers, 2)
    m.num_decoder_layers = min(m.num_decoder_layers, 2)
    t.steps = min(t.steps, 200)
    t.warmup_steps = min(t.warmup_steps, 20)
    t.log_every = min(t.log_every, 20)
    t.eval_every = t.steps
    t.checkpoint_every = t.steps
    t.eval_examples = 256
    d = config.data
    caps = {"num_train": 5000, "num_test": 256, "num_test_long": 256, "num_validation": 256}
    for name, cap in caps.items():
        if name in d:
            d[name] = min(d[name], cap)
    return config


QUICK = "quick"


def parse_arg(arg: str | None, choices=(), default: str | None = None) -> tuple[str | None, bool]:
    """The `:arg` of `--config=configs/x.py:arg`, for every config file: comma-separated, at
    most one of `choices` (else `default`) and optionally "quick". -> (choice, quick).

    `:reverse,quick` -> ("reverse", True); `:quick` -> (default, True); `` -> (default, False).
    """
    parts = [p for p in (arg or "").split(",") if p]
    quick = QUICK in parts
    picked = [p for p in parts if p != QUICK]
    if len(picked) > 1 or (picked and picked[0] not in choices):
        valid = f"one of {list(choices)}, optionally with ',quick', or " if choices else ""
        raise ValueError(f"config argument {arg!r} is not valid; valid: {valid}'' or 'quick'")
    return (picked[0] if picked else default), quick


def apply_arg(config: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
    """Handles the `:arg` of a config file without choices: "quick" shrinks the run."""
    _, quick = parse_arg(arg)
    return shrink(config) if quick else config


def from_file(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
    """Loads `get_config(arg)` from a config file, as `--config=path:arg` does."""
    import runpy

    return runpy.run_path(str(path))["get_config"](arg)
