"""Typed configs: `ModelConfig` (by concern) and `TrainConfig`, each validated on construction.
The sub-configs of the layers are declared beside their registries in `transformer_jax.layers`
and re-exported here.

Config files in configs/ are ml_collections ConfigDicts made from these dataclasses' defaults
(`transformer_jax.defaults`); the trainer turns them into the typed configs before anything
runs, and no module reads a default from anywhere else.
"""

from transformer_jax.config.model import (
    DATASET_TOKENS,
    EmbeddingConfig,
    ModelConfig,
    TokenConfig,
    UniversalConfig,
    ViTConfig,
)
from transformer_jax.config.train import TrainConfig
from transformer_jax.layers.attention import AttentionConfig
from transformer_jax.layers.feedforward import FeedForwardConfig
from transformer_jax.layers.norms import NormConfig
from transformer_jax.layers.positional import PositionalConfig

__all__ = [
    "DATASET_TOKENS",
    "AttentionConfig",
    "EmbeddingConfig",
    "FeedForwardConfig",
    "ModelConfig",
    "NormConfig",
    "PositionalConfig",
    "TokenConfig",
    "TrainConfig",
    "UniversalConfig",
    "ViTConfig",
]
