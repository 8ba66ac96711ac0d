"""A stack of blocks: positions, masks and biases in, N layers, final norm for pre-norm."""

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.config import ModelConfig
from transformer_jax.layers import masks
from transformer_jax.layers.norms import make_norm
from transformer_jax.layers.positional import AddPositional, alibi_bias
from transformer_jax.models.blocks import Block, BlockContext


def default_positions(ids_BT: jnp.ndarray) -> jnp.ndarray:
    """0, 1, 2, ... for every row. -> (B, T) int32."""
    return jnp.broadcast_to(jnp.arange(ids_BT.shape[1], dtype=jnp.int32), ids_BT.shape[:2])


class TransformerStack(nn.Module):
    """The encoder (causal=False) or decoder (causal=True) body, from embeddings to states.

    Takes embedded tokens (B, T, D), adds the absolute positional signal and dropout, builds the
    self-attention mask (padding, causal, packed segments, sliding window) and the ALiBi bias once,
    then applies `num_layers` blocks. The original post-norm Transformer has no final norm;
    pre-norm stacks end with one (as GPT-2 does).
    """

    config: ModelConfig
    num_layers: int
    causal: bool
    cross_attention: bool = False

    @nn.compact
    def __call__(
        self,
        x_BTD,
        *,
        positions_BT,
        valid_BT,
        segment_ids_BT=None,
        memory_BSD=None,
        memory_valid_BS=None,
        train: bool = False,
    ):
        cfg = self.config
        x_BTD = AddPositional(cfg, name="positional")(x_BTD, positions_BT)
        x_BTD = nn.Dropout(cfg.dropout_rate)(x_BTD, deterministic=not train)

        window = None
        if cfg.sliding_window:
            window = masks.sliding_window_mask(
                positions_BT,
                positions_BT,
                window=cfg.sliding_window,
                causal=self.causal,
                num_global=cfg.num_global_tokens,
            )
        context = BlockContext(
            positions_BT=positions_BT,
            self_mask=masks.combine(
                masks.padding_mask(valid_BT),
                masks.causal_mask(positions_BT, positions_BT) if self.causal else None,
                None
                if segment_ids_BT is None
                else masks.segment_mask(segment_ids_BT, segment_ids_BT),
                window,
            ),
            self_bias=alibi_bias(positions_BT, positions_BT, cfg.num_heads, causal=self.causal)
            if cfg.positional == "alibi"
            else None,
            memory_BSD=memory_BSD,
            cross_mask=None if memory_valid_BS is None else masks.padding_mask(memory_valid_BS),
        )
        for i in range(self.num_layers):
            x_BTD = Block(cfg, cross_attention=self.cross_attention, name=f"layer_{i}")(
                x_BTD, context, train=train
            )
        if cfg.norm_position == "pre":
            x_BTD = make_norm(cfg, name="final_norm")(x_BTD, train=train)
        return x_BTD
