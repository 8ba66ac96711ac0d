"""Model families, built from a `ModelConfig` by `build_model`; see `families.py`."""

from transformer_jax.models.families import FAMILIES, Family, family_of


def build_model(config):
    """The flax module of `config.family`."""
    return family_of(config).module(config)


__all__ = ["FAMILIES", "Family", "build_model", "family_of"]
