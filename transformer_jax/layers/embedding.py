"""Token embeddings scaled by sqrt(d_model), shareable as the output projection (Vaswani §3.4)."""

import math

import flax.linen as nn
import jax.numpy as jnp


def token_embedding(config, name: str | None = None) -> "TokenEmbedding":
    """The token table of a `ModelConfig`."""
    return TokenEmbedding(
        config.vocab_size, config.d_model, config.embeddings.scale, config.dtype, name=name
    )


class TokenEmbedding(nn.Module):
    """`encode`: (B, T) ids -> (B, T, D); `decode`: (B, T, D) -> (B, T, V) logits in float32.

    The table is initialised with std d_model^-0.5, so that after the sqrt(d_model) scaling the
    embeddings have unit variance, comparable to the sinusoidal signal added to them.
    """

    vocab_size: int
    d_model: int
    scale: bool = True  # model.embeddings.scale
    dtype: str = "float32"

    def setup(self):
        self.table = nn.Embed(
            self.vocab_size,
            self.d_model,
            embedding_init=nn.initializers.normal(stddev=self.d_model**-0.5),
            param_dtype=jnp.float32,
            name="table",
        )

    def encode(self, ids_BT):
        x_BTD = self.table(ids_BT).astype(jnp.dtype(self.dtype))
        if self.scale:
            x_BTD = x_BTD * math.sqrt(self.d_model)
        return x_BTD

    def decode(self, x_BTD):
        return self.table.attend(x_BTD.astype(jnp.float32))


class OutputProjection(nn.Module):
    """An untied output layer: (B, T, D) -> (B, T, V) logits in float32."""

    vocab_size: int
    use_bias: bool = True

    @nn.compact
    def __call__(self, x_BTD):
        return nn.Dense(self.vocab_size, use_bias=self.use_bias, dtype=jnp.float32, name="logits")(
            x_BTD
        )


class OutputBias(nn.Module):
    """A learned bias (V,) added to tied logits (B, T, V), initialised to zeros: Marian's
    final_logits_bias (transformers models/marian/modeling_marian.py:819, :975)."""

    vocab_size: int

    @nn.compact
    def __call__(self, logits_BTV):
        bias_V = self.param("bias", nn.initializers.zeros, (self.vocab_size,), jnp.float32)
        return logits_BTV + bias_V.reshape((1,) * (logits_BTV.ndim - 1) + (-1,))


def output_layer(config) -> nn.Module | None:
    """The output layer of a `ModelConfig`, for a model's setup to assign to `self.output`: an
    untied projection, a tied table's bias, or None (tied, no bias)."""
    embeddings = config.embeddings
    if not embeddings.tie_output:
        return OutputProjection(config.vocab_size, embeddings.has_output_bias)
    return OutputBias(config.vocab_size) if embeddings.has_output_bias else None


def output_logits(output: nn.Module | None, embedding: TokenEmbedding, y_BTD):
    """(B, T, D) final states -> (B, T, V) float32 logits through `output` (from
    `output_layer`) and, where it is tied, the transposed token table `embedding`."""
    if isinstance(output, OutputProjection):
        return output(y_BTD)
    logits_BTV = embedding.decode(y_BTD)
    return logits_BTV if output is None else output(logits_BTV)
