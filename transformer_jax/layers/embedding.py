"""Token embeddings scaled by sqrt(d_model), shareable as the output projection (Vaswani §3.4)."""

import math

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.config import ModelConfig


class TokenEmbedding(nn.Module):
    """`encode`: (B, T) ids -> (B, T, D); `decode`: (B, T, D) -> (B, T, V) logits in float32.

    The table is initialised with std d_model^-0.5, so that after the sqrt(d_model) scaling the
    embeddings have unit variance, comparable to the sinusoidal signal added to them.
    """

    config: ModelConfig

    def setup(self):
        cfg = self.config
        self.table = nn.Embed(
            cfg.vocab_size,
            cfg.d_model,
            embedding_init=nn.initializers.normal(stddev=cfg.d_model**-0.5),
            param_dtype=jnp.float32,
            name="table",
        )

    def encode(self, ids_BT):
        x_BTD = self.table(ids_BT).astype(jnp.dtype(self.config.dtype))
        if self.config.scale_embeddings:
            x_BTD = x_BTD * math.sqrt(self.config.d_model)
        return x_BTD

    def decode(self, x_BTD):
        return self.table.attend(x_BTD.astype(jnp.float32))


class OutputProjection(nn.Module):
    """An untied output layer: (B, T, D) -> (B, T, V) logits in float32."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x_BTD):
        return nn.Dense(self.config.vocab_size, dtype=jnp.float32, name="logits")(x_BTD)
