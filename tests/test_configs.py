"""Every config file in configs/ loads, with and without `:quick`, and builds its model."""

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from tiny_configs import typed_model

from transformer_jax import defaults
from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.models import FAMILIES, build_model

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# The arguments each file documents; every file also takes "" and "quick".
CHOICES = {
    "algorithmic.py": ("copy", "reverse", "sort"),
    "ablation.py": ("reverse", "copy", "sort", "addition"),
    "vit_paper.py": ("ti16", "s16", "b16"),
    "multi30k.py": ("de-en", "en-de"),
}
# Quick runs are short: 200 steps, except where a smoke run needs more to show anything
# (translation needs about an epoch for a BLEU clearly above zero).
QUICK_STEPS = {"multi30k.py": 400}
CASES = [
    (name, arg)
    for name in sorted(p.name for p in CONFIGS.glob("*.py"))
    for choice in ("",) + CHOICES.get(name, ())
    for arg in (choice, f"{choice},quick" if choice else "quick")
]


def sample_inputs(cfg: ModelConfig):
    family = FAMILIES[cfg.family]
    if family.reads_images:
        images = jnp.zeros((1, cfg.vit.image_size, cfg.vit.image_size, cfg.vit.num_channels))
        return {"inputs": images}
    ids = jnp.ones((1, 8), jnp.int32)
    return {"inputs": ids, "targets": ids}


@pytest.mark.parametrize("name,arg", CASES)
def test_config_file_loads_and_builds_its_model(name, arg):
    config = defaults.from_file(CONFIGS / name, arg)
    TrainConfig.from_dict(config.train.to_dict())
    cfg = typed_model(config)
    model = build_model(cfg)
    args, kwargs = FAMILIES[cfg.family].inputs(sample_inputs(cfg), cfg.tokens)
    shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), *args, **kwargs))
    assert jax.tree.leaves(shapes["params"])
    if arg.endswith("quick"):
        assert config.train.steps <= QUICK_STEPS.get(name, 200)


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_unknown_config_argument_names_the_valid_ones(name):
    with pytest.raises(
        ValueError, match=f"config argument 'bogus' is not valid.*{CHOICES[name][0]}"
    ):
        defaults.from_file(CONFIGS / name, "bogus")
