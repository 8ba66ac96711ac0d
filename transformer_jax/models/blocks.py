"""One Transformer layer: attention and feed-forward sublayers, each wrapped in Add & Norm.

A block maps (B, T, D) to (B, T, D) (NTHU slides 43-45), so depth is just a number of blocks.
"""

from typing import NamedTuple

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.config import ModelConfig
from transformer_jax.layers.attention import MultiHeadAttention
from transformer_jax.layers.feedforward import FeedForward
from transformer_jax.layers.norms import make_norm


class BlockContext(NamedTuple):
    """What every layer of a stack shares: built once per forward pass, not once per layer."""

    positions_BT: jnp.ndarray
    self_mask: jnp.ndarray | None  # Boolean, broadcastable to (B, N, T, T); (B, N, T, L) cached.
    self_bias: jnp.ndarray | None  # ALiBi logit bias (B|1, N, T, T); (B|1, N, T, L) cached.
    memory_BSD: jnp.ndarray | None = None  # Encoder output, for cross-attention.
    cross_mask: jnp.ndarray | None = None  # The encoder's padding mask, (B, 1, 1, S).
    cache_index: jnp.ndarray | None = None  # Decoding: the cache slot of the first new token.
    # The masks as segment ids (query (B, T), key (B, S)), for kernels that take them so
    # (MultiHeadAttention `segments`); None where a mask is not of that form.
    self_segments: tuple | None = None
    cross_segments: tuple | None = None


class Block(nn.Module):
    """Self-attention, optional cross-attention (decoder), then the feed-forward network.

    Sublayer connection, per `norm.position`:
      post (the paper): x = Norm(x + Dropout(F(x)))
      pre:              x = x + Dropout(F(Norm(x)))
    With `norm.residual=False` the `x +` is dropped (the NCCU residual ablation).
    """

    config: ModelConfig
    cross_attention: bool = False
    use_cache: bool = False  # Incremental decoding; see MultiHeadAttention.
    causal: bool = False  # The self-attention mask hides later keys; see MultiHeadAttention.

    @nn.compact
    def __call__(self, x_BTD, context: BlockContext, *, train: bool = False):
        cfg = self.config
        self_attention = MultiHeadAttention(
            cfg.attention,
            cfg.positional,
            cfg.dtype,
            use_cache=self.use_cache,
            causal=self.causal,
            name="self_attention",
        )
        x_BTD = self._sublayer(
            x_BTD,
            lambda h: self_attention(
                h,
                h,
                mask=context.self_mask,
                bias=context.self_bias,
                segments=context.self_segments,
                q_pos_BT=context.positions_BT,
                k_pos_BS=context.positions_BT,
                cache_index=context.cache_index,
                train=train,
            ),
            "attention",
            train,
        )
        if self.cross_attention:
            cross_attention = MultiHeadAttention(
                cfg.attention,
                dtype=cfg.dtype,
                self_attention=False,
                use_cache=self.use_cache,
                name="cross_attention",
            )
            x_BTD = self._sublayer(
                x_BTD,
                lambda h: cross_attention(
                    h,
                    context.memory_BSD,
                    mask=context.cross_mask,
                    segments=context.cross_segments,
                    train=train,
                ),
                "cross_attention",
                train,
            )
        ffn = FeedForward(cfg.ffn, cfg.dtype, name="ffn")
        return self._sublayer(x_BTD, lambda h: ffn(h, train=train), "ffn", train)

    def _sublayer(self, x_BTD, sublayer, name: str, train: bool):
        norm_cfg = self.config.norm
        norm = make_norm(norm_cfg, name=f"norm_{name}")
        dropout = nn.Dropout(self.config.dropout_rate, name=f"dropout_{name}")
        if norm_cfg.position == "pre":
            y_BTD = dropout(sublayer(norm(x_BTD, train=train)), deterministic=not train)
            return x_BTD + y_BTD if norm_cfg.residual else y_BTD
        y_BTD = dropout(sublayer(x_BTD), deterministic=not train)
        return norm(x_BTD + y_BTD if norm_cfg.residual else y_BTD, train=train)
