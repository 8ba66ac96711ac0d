"""Boolean attention masks, built from positions so that cached decoding reuses them unchanged.

A mask is True where a query may attend to a key; shapes broadcast to (B, N, T, S).
"""

import jax.numpy as jnp

# Segment id of padded tokens in `self_attention_segments`: no real token has it.
PADDING_SEGMENT = -1


def causal_mask(q_pos_BT: jnp.ndarray, k_pos_BS: jnp.ndarray) -> jnp.ndarray:
    """Decoder self-attention: query i sees keys j <= i (NTHU slides 46-49). -> (B, 1, T, S)."""
    return k_pos_BS[:, None, None, :] <= q_pos_BT[:, None, :, None]


def padding_mask(k_valid_BS: jnp.ndarray) -> jnp.ndarray:
    """Hides padded keys; also used for cross-attention with the encoder's mask. -> (B,1,1,S)."""
    return k_valid_BS[:, None, None, :].astype(bool)


def segment_mask(q_seg_BT: jnp.ndarray, k_seg_BS: jnp.ndarray) -> jnp.ndarray:
    """Packed sequences: a token sees only its own document. -> (B, 1, T, S)."""
    return q_seg_BT[:, None, :, None] == k_seg_BS[:, None, None, :]


def sliding_window_mask(
    q_pos_BT: jnp.ndarray,
    k_pos_BS: jnp.ndarray,
    *,
    window: int,
    causal: bool,
    num_global: int = 0,
) -> jnp.ndarray:
    """Longformer-style local attention (Beltagy et al. 2020), -> (B, 1, T, S).

    Bidirectional: query i sees keys with |i - j| <= window // 2 (half the window on each side,
    as in Longformer). Causal: query i sees the `window` keys i - window < j <= i. The first
    `num_global` positions are global: they see every key and every query sees them (combine
    with `causal_mask` to keep decoders causal).
    """
    offset = q_pos_BT[:, None, :, None] - k_pos_BS[:, None, None, :]
    if causal:
        local = (offset >= 0) & (offset < window)
    else:
        local = jnp.abs(offset) <= window // 2
    if num_global:
        global_query = q_pos_BT[:, None, :, None] < num_global
        global_key = k_pos_BS[:, None, None, :] < num_global
        local = local | global_query | global_key
    return local


def combine(*masks: jnp.ndarray | None) -> jnp.ndarray | None:
    """Logical AND of the masks that are not None (None means no constraint)."""
    result = None
    for mask in masks:
        if mask is not None:
            result = mask if result is None else result & mask
    return result


def self_attention_segments(k_valid_BS, segment_ids_BT=None) -> jnp.ndarray:
    """Segment ids whose equality is the padding and packing mask of self-attention. -> (B, T).

    Padded tokens get PADDING_SEGMENT: real queries never see them, and a padded query sees the
    padded keys (not the real ones, as the boolean mask would have it); padded positions are
    ignored by every loss and metric, and no row is left without a key (its own token), which
    splash attention needs (layers/splash.py)."""
    segments_BT = jnp.zeros(k_valid_BS.shape, jnp.int32)
    if segment_ids_BT is not None:
        segments_BT = segment_ids_BT.astype(jnp.int32)
    return jnp.where(k_valid_BS.astype(bool), segments_BT, PADDING_SEGMENT)


def cross_attention_segments(q_len: int, memory_valid_BS) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Query (B, T) and key (B, S) segment ids whose equality is the encoder's padding mask.

    An example without a valid encoder token (a batch's filler) sees all of its keys instead
    of none: splash attention needs a key per query, and the example's outputs are ignored."""
    valid_BS = memory_valid_BS.astype(bool)
    valid_BS = valid_BS | ~jnp.any(valid_BS, axis=1, keepdims=True)
    q_segments_BT = jnp.zeros((valid_BS.shape[0], q_len), jnp.int32)
    return q_segments_BT, jnp.where(valid_BS, 0, 1).astype(jnp.int32)
