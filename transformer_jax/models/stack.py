"""A stack of blocks: positions, masks and biases in, N layers, final norm for pre-norm."""

import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax.config import ModelConfig
from transformer_jax.layers import masks
from transformer_jax.layers.norms import make_norm
from transformer_jax.layers.positional import AddPositional, encoding, training_positions
from transformer_jax.models.blocks import BlockContext
from transformer_jax.models.scan import apply_layers

# model.positional.eval_positions other than "plain", without a "positions" rng, draws from this
# seed.
EVAL_POSITIONS_SEED = 0


def default_positions(ids_BT: jnp.ndarray) -> jnp.ndarray:
    """0, 1, 2, ... for every row of a (B, T, ...) array. -> (B, T) int32."""
    return jnp.broadcast_to(jnp.arange(ids_BT.shape[1], dtype=jnp.int32), ids_BT.shape[:2])


def mask_positions(valid_BT: jnp.ndarray) -> jnp.ndarray:
    """Positions counted from each row's first real token: index - the row's leading padding,
    so a left-padded row gets the positions it has unpadded, and a row without leading padding
    its indices (padding later in a row keeps its slot, as `default_positions` gives it); the
    leading padding gets 0. -> (B, T) int32."""
    leading_B1 = jnp.sum(jnp.cumprod(~valid_BT, axis=1), axis=1, keepdims=True)
    return jnp.maximum(default_positions(valid_BT) - leading_B1.astype(jnp.int32), 0)


def build_context(
    cfg: ModelConfig,
    module: nn.Module,
    *,
    causal: bool,
    q_pos_BT,
    k_pos_BS,
    k_valid_BS,
    segment_ids_BT=None,
    memory_BSD=None,
    memory_valid_BS=None,
    cache_index=None,
    causal_by_index: bool = False,
) -> BlockContext:
    """The masks and biases every layer of a stack shares, built once per forward pass.

    Self-attention mask: padding, causal, packed segments and sliding window combined; the logit
    bias of the positional encoding, if it has one (ALiBi), with `module` (the stack calling this
    from its compact method) holding any parameter of that bias. Key positions / validity are
    (B, S), or (B, L) when cached. `causal_by_index`: the positions grow with the index within
    a document, so a causal mask is causal order by index, as segment-id kernels take it.
    """
    attention = cfg.attention
    window = None
    if attention.sliding_window:
        window = masks.sliding_window_mask(
            q_pos_BT,
            k_pos_BS,
            window=attention.sliding_window,
            causal=causal,
            num_global=attention.num_global_tokens,
        )
    # The self-attention mask as segment ids where it is padding, packing and (causal stacks)
    # causal order by index and nothing else: no window, no cache.
    by_segments = not attention.sliding_window and cache_index is None
    self_segments = None
    if by_segments and (causal_by_index or not causal):
        segments_BT = masks.self_attention_segments(k_valid_BS, segment_ids_BT)
        self_segments = (segments_BT, segments_BT)
    cross_segments = None
    if memory_valid_BS is not None:
        cross_segments = masks.cross_attention_segments(q_pos_BT.shape[1], memory_valid_BS)
    return BlockContext(
        positions_BT=q_pos_BT,
        self_mask=masks.combine(
            masks.padding_mask(k_valid_BS),
            masks.causal_mask(q_pos_BT, k_pos_BS) if causal else None,
            None if segment_ids_BT is None else masks.segment_mask(segment_ids_BT, segment_ids_BT),
            window,
        ),
        self_bias=encoding(cfg.positional).logit_bias(
            module, q_pos_BT, k_pos_BS, attention.num_heads, causal=causal
        ),
        memory_BSD=memory_BSD,
        cross_mask=None if memory_valid_BS is None else masks.padding_mask(memory_valid_BS),
        cache_index=cache_index,
        self_segments=self_segments,
        cross_segments=cross_segments,
    )


class TransformerStack(nn.Module):
    """The encoder (causal=False) or decoder (causal=True) body, from embeddings to states.

    Takes embedded tokens (B, T, D), adds the absolute positional signal and dropout, builds the
    self-attention mask (padding, causal, packed segments, sliding window) and the ALiBi bias once,
    then applies `num_layers` blocks. The original post-norm Transformer has no final norm;
    pre-norm stacks end with one (as GPT-2 does). `positions_BT` defaults to 0, 1, 2, ...

    With `use_cache` (causal stacks only) the T tokens are the next ones of a sequence being
    decoded: the "cache" collection holds cache_index (how many tokens came before) and
    cached_valid (B, L), which key slots hold real tokens. The new tokens sit at positions
    cache_index, ..., cache_index + T - 1 and attend to every cache slot through the same
    position-built masks and ALiBi bias as a full pass, so the result equals a full forward pass
    over the sequence so far. The first call creates the cache (length L = that call's T) and is
    an ordinary forward pass; see `transformer_jax.decoding`.

    In training, `model.positional.train_positions` other than "plain" replaces the default
    positions with random ones from the "positions" rng stream (`training_positions`); in
    evaluation `model.positional.eval_positions` does (from that stream when given, else from a
    fixed key).
    """

    config: ModelConfig
    num_layers: int
    causal: bool
    cross_attention: bool = False
    use_cache: bool = False

    @nn.compact
    def __call__(
        self,
        x_BTD,
        *,
        valid_BT,
        positions_BT=None,
        segment_ids_BT=None,
        memory_BSD=None,
        memory_valid_BS=None,
        train: bool = False,
    ):
        key = self._positions_key(positions_BT, segment_ids_BT, train)
        # Default or packed positions grow with the index within a document, so the
        # position-built causal mask hides every later key; explicit positions need not.
        blocked = self.causal and (positions_BT is None or segment_ids_BT is not None)
        q_pos_BT, context = self._context(
            valid_BT, positions_BT, segment_ids_BT, memory_BSD, memory_valid_BS, train, key, blocked
        )
        x_BTD = self._body(
            x_BTD,
            q_pos_BT,
            context,
            valid_BT=valid_BT,
            blocked=blocked,
            train=train,
            positions_key=key,
        )
        if self.config.norm.position == "pre":
            x_BTD = make_norm(self.config.norm, name="final_norm")(x_BTD, train=train)
        return x_BTD

    def _body(
        self, x_BTD, q_pos_BT, context, *, valid_BT, blocked: bool, train: bool, positions_key
    ):
        """Positions, dropout and the layers: (B, T, D) embeddings -> (B, T, D) states.
        `blocked`: the causal mask hides every later key (see MultiHeadAttention).
        `positions_key`: the key the random positions were drawn from, or None."""
        del valid_BT, positions_key
        cfg = self.config
        x_BTD = AddPositional(cfg.positional, name="positional")(x_BTD, q_pos_BT)
        if cfg.embeddings.norm:  # BART's layernorm_embedding: after the positions, before dropout
            x_BTD = make_norm(cfg.norm, name="embedding_norm")(x_BTD, train=train)
        x_BTD = nn.Dropout(cfg.dropout_rate)(x_BTD, deterministic=not train)
        return apply_layers(  # Unrolled or scanned, with remat: see models/scan.py.
            cfg,
            self.num_layers,
            x_BTD,
            context,
            cross_attention=self.cross_attention,
            use_cache=self.use_cache,
            train=train,
            causal=blocked,
        )

    def _context(
        self,
        valid_BT,
        positions_BT,
        segment_ids_BT,
        memory_BSD,
        memory_valid_BS,
        train,
        key,
        blocked: bool,
    ):
        """-> query positions (B, T) and the BlockContext every layer (or step) shares.
        `blocked`: the causal mask is causal order by index (see __call__)."""
        q_pos_BT, k_pos_BS, k_valid_BS, cache_index = self._positions(
            valid_BT, positions_BT, segment_ids_BT, train, key
        )
        context = build_context(
            self.config,
            self,
            causal=self.causal,
            q_pos_BT=q_pos_BT,
            k_pos_BS=k_pos_BS,
            k_valid_BS=k_valid_BS,
            segment_ids_BT=segment_ids_BT,
            memory_BSD=memory_BSD,
            memory_valid_BS=memory_valid_BS,
            cache_index=cache_index,
            causal_by_index=blocked,
        )
        return q_pos_BT, context

    def _scheme(self, train: bool) -> str:
        """The positions scheme of this pass: train_positions or eval_positions."""
        positional = self.config.positional
        return positional.train_positions if train else positional.eval_positions

    def _positions_key(self, positions_BT, segment_ids_BT, train):
        """The key random positions are drawn from, or None for plain or cached positions:
        the "positions" rng stream when the caller passes one, else (evaluation) a fixed key
        per stack, so that evaluations without one are deterministic."""
        scheme = self._scheme(train)
        if self.use_cache or scheme == "plain":
            return None
        if positions_BT is not None or segment_ids_BT is not None:
            field = "train_positions" if train else "eval_positions"
            raise ValueError(
                f"model.positional.{field}={scheme!r} draws the positions of whole "
                "sequences; it cannot serve inputs with given positions or packed segments "
                f"(a classifier, a ViT or packed batches): use {field}='plain'"
            )
        if self.has_rng("positions"):
            return self.make_rng("positions")
        return jax.random.fold_in(
            jax.random.PRNGKey(EVAL_POSITIONS_SEED), zlib.crc32(str(self.name).encode())
        )

    def _positions(self, valid_BT, positions_BT, segment_ids_BT, train, key):
        """-> query positions (B, T), key positions and validity (B, S), cache index or None."""
        if self.use_cache:
            return self._cached_positions(valid_BT, positions_BT, segment_ids_BT)
        if key is None:
            q_pos_BT = default_positions(valid_BT) if positions_BT is None else positions_BT
        else:
            q_pos_BT = training_positions(
                self._scheme(train), key, valid_BT, self.config.positional.max_len
            )
        return q_pos_BT, q_pos_BT, valid_BT, None

    def _cached_positions(self, valid_BT, positions_BT, segment_ids_BT):
        """-> query positions (B, T), key positions and validity (B, L), cache index (or None)."""
        if not self.causal:
            raise ValueError("use_cache=True needs a causal stack: only decoders decode")
        if positions_BT is not None or segment_ids_BT is not None:
            raise ValueError(
                "positions_BT and segment_ids_BT must be None with use_cache=True: a decoded "
                "sequence is one document whose positions come from the cache index"
            )
        creating = not self.has_variable("cache", "cache_index")
        index = self.variable("cache", "cache_index", lambda: jnp.array(0, jnp.int32))
        cached_valid = self.variable("cache", "cached_valid", jnp.zeros_like, valid_BT)
        if creating:  # An ordinary forward pass that sizes the cache.
            positions_BT = default_positions(valid_BT)
            return positions_BT, positions_BT, valid_BT, None
        start = index.value
        cached_valid.value = jax.lax.dynamic_update_slice(cached_valid.value, valid_BT, (0, start))
        index.value = start + valid_BT.shape[1]
        # Positions from the row's first real token, so left padding is skipped; without
        # leading padding they are the indices.
        k_pos_BL = mask_positions(cached_valid.value)
        q_pos_BT = jax.lax.dynamic_slice_in_dim(k_pos_BL, start, valid_BT.shape[1], axis=1)
        return q_pos_BT, k_pos_BL, cached_valid.value, start
