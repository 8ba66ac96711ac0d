"""Every shipped sweep loads, names existing fields, and every variant builds valid typed configs.

`check_overrides` checks names and types before a sweep starts; building each variant's
ModelConfig and TrainConfig also checks the values (a misspelt choice, a bad combination).
"""

from pathlib import Path

import pytest
from ml_collections.config_flags import config_path
from tiny_configs import typed_model

from transformer_jax import defaults
from transformer_jax.config import TrainConfig
from transformer_jax.sweep import check_overrides, load_sweep

REPO = Path(__file__).resolve().parents[2]
SWEEPS = sorted(p.name for p in (REPO / "experiments").glob("*.py"))


@pytest.mark.parametrize("name", SWEEPS)
def test_shipped_sweep_loads_and_every_variant_builds(name, monkeypatch):
    monkeypatch.chdir(REPO)  # sweep files name their configs relative to the repository
    sweep = load_sweep(f"experiments/{name}")
    check_overrides(sweep, sweep.config_arg)
    for variant, overrides in sweep.variants.items():
        config = defaults.from_file(sweep.config, sweep.config_arg)
        for key, value in overrides.items():
            config_path.set_value(key, config, value)
        try:
            typed_model(config)
            TrainConfig.from_dict(config.train.to_dict())
        except ValueError as error:
            raise AssertionError(f"{name}: variant {variant!r}: {error}") from error
