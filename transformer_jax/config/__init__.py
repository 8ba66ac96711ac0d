"""Typed configs: `ModelConfig` (by concern) and `TrainConfig`, each validated on construction.

Config files in configs/ are ml_collections ConfigDicts made from these dataclasses' defaults
(`transformer_jax.defaults`); the trainer turns them into the typed configs before anything
runs, and no module reads a default from anywhere else.
"""

from transformer_jax.config.model import (
    AttentionConfig,
    EmbeddingConfig,
    FeedForwardConfig,
    ModelConfig,
    NormConfig,
    PositionalConfig,
    UniversalConfig,
    ViTConfig,
)
from transformer_jax.config.train import TrainConfig

__all__ = [
    "AttentionConfig",
    "EmbeddingConfig",
    "FeedForwardConfig",
    "ModelConfig",
    "NormConfig",
    "PositionalConfig",
    "TrainConfig",
    "UniversalConfig",
    "ViTConfig",
]
