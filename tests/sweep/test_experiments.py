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
    # With nuisance factors, every variant at every setting.
    for variant, overrides in sweep.run_variants.items():
        config = defaults.from_file(sweep.config, sweep.config_arg)
        for key, value in overrides.items():
            config_path.set_value(key, config, value)
        try:
            typed_model(config)
            TrainConfig.from_dict(config.train.to_dict())
        except ValueError as error:
            raise AssertionError(f"{name}: variant {variant!r}: {error}") from error


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "variant"),
    [
        ("universal_table4.py", "ut_act_offset"),
        ("length_generalization.py", "randomized"),
        ("universal_table4_t2t.py", "ut_act"),
        ("universal_table4_t2t_buckets.py", "ut_act"),
        ("length_generalization_ruoss.py", "batch_eval"),
    ],
)
def test_faithful_protocol_sweeps_run_quick_and_log_every_metric_they_report(
    name, variant, tmp_path, monkeypatch
):
    """The --quick path of the Table 4 and length-generalisation sweeps: a shrunk run of their
    most involved variant trains, and its summary holds every metric the sweep's report reads."""
    from transformer_jax.train.trainer import train_and_evaluate

    monkeypatch.chdir(REPO)
    sweep = load_sweep(f"experiments/{name}")
    config = defaults.from_file(sweep.config, ",".join(filter(None, (sweep.config_arg, "quick"))))
    for key, value in sweep.variants[variant].items():
        config_path.set_value(key, config, value)
    config.data.data_dir = str(tmp_path / "tfds")
    config.train.update(steps=20, log_every=10, eval_every=20, checkpoint_every=20)
    summary = train_and_evaluate(config, str(tmp_path / "run"))
    for metric in sweep.metrics:
        split, _, key = metric.partition("/")
        assert key in summary.metrics[split], metric
