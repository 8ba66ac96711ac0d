"""A decoder-only language model: causal self-attention, no encoder (GPT-2 style)."""

import flax.linen as nn

from transformer_jax.config import ModelConfig
from transformer_jax.layers.embedding import output_layer, output_logits, token_embedding
from transformer_jax.models.universal import stack_class


class DecoderOnly(nn.Module):
    """(B, T) input ids -> (B, T, V) float32 next-token logits.

    Packed batches pass `segment_ids_BT` (a token attends only within its document) and
    `positions_BT` (positions restart at 0 in each document). With `use_cache` the ids are the
    next tokens of sequences being decoded, their keys and values kept in the "cache" collection
    (see `transformer_jax.decoding`), their positions counted from each row's first real token
    (left padding is skipped: models/stack.py `mask_positions`); parameters are the same either
    way.
    """

    config: ModelConfig
    use_cache: bool = False

    def setup(self):
        cfg = self.config
        self.embedding = token_embedding(cfg)
        self.output = output_layer(cfg)
        self.decoder = stack_class(cfg)(
            cfg, cfg.num_decoder_layers, causal=True, use_cache=self.use_cache
        )

    def __call__(
        self,
        ids_BT,
        *,
        valid_BT=None,
        segment_ids_BT=None,
        positions_BT=None,
        train: bool = False,
    ):
        """`valid_BT`: the tokens that are not padding (default: `model.tokens.valid`)."""
        y_BTD = self.decoder(
            self.embedding.encode(ids_BT),
            positions_BT=positions_BT,
            valid_BT=self.config.tokens.valid(ids_BT) if valid_BT is None else valid_BT,
            segment_ids_BT=segment_ids_BT,
            train=train,
        )
        return output_logits(self.output, self.embedding, y_BTD)
