"""Boolean attention masks, built from positions so that cached decoding reuses them unchanged.

A mask is True where a query may attend to a key; shapes broadcast to (B, N, T, S).
"""

import jax.numpy as jnp


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
