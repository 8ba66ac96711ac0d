"""The original Transformer: encoder, decoder with cross-attention (Vaswani et al. 2017)."""

import flax.linen as nn

from transformer_jax.config import ModelConfig
from transformer_jax.layers.embedding import (
    TokenEmbedding,
    output_layer,
    output_logits,
    token_embedding,
)
from transformer_jax.models.universal import stack_class


class EncoderDecoder(nn.Module):
    """(B, S) source ids and (B, T) decoder input ids -> (B, T, V) float32 logits.

        The decoder input is the target shifted right behind BOS (teacher forcing, NTHU slides
        55-56); padding, in both, is what `valid_BS` / `valid_BT` exclude (default: the tokens
    `model.tokens.valid` calls padding). `encode` and `decode` are exposed for generation; with
        `use_cache` the decoder keeps its keys and values, and the cross-attention keys and values
        of the encoder output, in the "cache" collection (see `transformer_jax.decoding`).
        Parameters are the same either way.
    """

    config: ModelConfig
    use_cache: bool = False  # The decoder's; the encoder always sees the whole source.

    def setup(self):
        cfg = self.config
        self.source_embedding = token_embedding(cfg)
        if not cfg.embeddings.share_source_target:
            self.target_embedding = token_embedding(cfg)
        self.output = output_layer(cfg)
        self.encoder = stack_class(cfg)(cfg, cfg.num_encoder_layers, causal=False)
        self.decoder = stack_class(cfg)(
            cfg,
            cfg.num_decoder_layers,
            causal=True,
            cross_attention=True,
            use_cache=self.use_cache,
        )

    def _target_embedding(self) -> TokenEmbedding:
        if self.config.embeddings.share_source_target:
            return self.source_embedding
        return self.target_embedding

    def encode(self, inputs_BS, *, valid_BS=None, train: bool = False):
        """-> encoder states (B, S, D) and the source padding mask (B, S)."""
        if valid_BS is None:
            valid_BS = self.config.tokens.valid(inputs_BS)
        memory_BSD = self.encoder(
            self.source_embedding.encode(inputs_BS),
            valid_BT=valid_BS,
            train=train,
        )
        return memory_BSD, valid_BS

    def decode(
        self,
        decoder_inputs_BT,
        memory_BSD,
        memory_valid_BS,
        *,
        valid_BT=None,
        positions_BT=None,
        train: bool = False,
    ):
        """-> (B, T, V) float32 logits of the next target tokens."""
        embedding = self._target_embedding()
        if valid_BT is None:
            valid_BT = self.config.tokens.valid(decoder_inputs_BT)
        y_BTD = self.decoder(
            embedding.encode(decoder_inputs_BT),
            valid_BT=valid_BT,
            positions_BT=positions_BT,
            memory_BSD=memory_BSD,
            memory_valid_BS=memory_valid_BS,
            train=train,
        )
        return output_logits(self.output, embedding, y_BTD)

    def __call__(
        self, inputs_BS, decoder_inputs_BT, *, valid_BS=None, valid_BT=None, train: bool = False
    ):
        memory_BSD, valid_BS = self.encode(inputs_BS, valid_BS=valid_BS, train=train)
        return self.decode(decoder_inputs_BT, memory_BSD, valid_BS, valid_BT=valid_BT, train=train)
