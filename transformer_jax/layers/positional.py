"""Positional encodings: what tells a permutation-equivariant attention layer where words sit.

Additive ones (`sinusoidal`, `learned`, `index`) are added to the token embeddings; `rotary`
rotates queries and keys inside attention; `alibi` biases the attention logits; `none` leaves the
model blind to order (NTHU slide 21, the "Amy" example).
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from transformer_jax.config import ModelConfig

ADDITIVE = ("sinusoidal", "learned", "index")


def sinusoidal_table(length: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani §3.5). -> (L, D).

    Positions start at 0. Computed in float64 with NumPy, so the table is exact to float32.
    """
    pos_L1 = np.arange(length, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    angle_LI = pos_L1 / base ** (two_i / d_model)
    table_LD = np.zeros((length, d_model), dtype=np.float64)
    table_LD[:, 0::2] = np.sin(angle_LI)
    table_LD[:, 1::2] = np.cos(angle_LI[:, : d_model // 2])
    return table_LD.astype(np.float32)


def rotary_angles(positions: jnp.ndarray, head_dim: int, base: float = 10000.0) -> jnp.ndarray:
    """m * theta_i with theta_i = base^(-2i/d) (RoFormer, Su et al. 2021). -> (..., head_dim/2)."""
    theta_I = base ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    return positions.astype(jnp.float32)[..., None] * theta_I.reshape((1,) * positions.ndim + (-1,))


def apply_rotary(x_BTNH: jnp.ndarray, pos_BT: jnp.ndarray, base: float = 10000.0) -> jnp.ndarray:
    """Rotates each pair (x_2i, x_2i+1) by the angle m * theta_i, m the token's position.

    Applied to queries and keys only: their dot product then depends on m - n alone.
    """
    head_dim = x_BTNH.shape[-1]
    angle_BT1I = rotary_angles(pos_BT, head_dim, base)[:, :, None, :]
    cos, sin = jnp.cos(angle_BT1I), jnp.sin(angle_BT1I)
    x = x_BTNH.astype(jnp.float32)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated_BTNI2 = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
    return rotated_BTNI2.reshape(x_BTNH.shape).astype(x_BTNH.dtype)


def alibi_slopes(num_heads: int) -> np.ndarray:
    """Head slopes 2^(-8k/n), k = 1..n (Press et al. 2022); non-powers of two as in the paper."""

    def power_of_two_slopes(n: int) -> list[float]:
        return [2 ** (-8.0 * k / n) for k in range(1, n + 1)]

    closest = 2 ** int(np.floor(np.log2(num_heads)))
    slopes = power_of_two_slopes(closest)
    if closest < num_heads:
        slopes += power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return np.asarray(slopes, dtype=np.float32)


def alibi_bias(
    q_pos_BT: jnp.ndarray, k_pos_BS: jnp.ndarray, num_heads: int, *, causal: bool
) -> jnp.ndarray:
    """-slope_h * distance added to the logits. -> (B, N, T, S).

    Causal attention uses i - j (the paper); bidirectional attention uses |i - j|.
    """
    distance_BTS = (q_pos_BT[:, :, None] - k_pos_BS[:, None, :]).astype(jnp.float32)
    if not causal:
        distance_BTS = jnp.abs(distance_BTS)
    slopes_N = jnp.asarray(alibi_slopes(num_heads))
    return -slopes_N[None, :, None, None] * distance_BTS[:, None, :, :]


class AddPositional(nn.Module):
    """Adds an absolute position signal to embeddings (no-op for rotary, alibi and none)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x_BTD: jnp.ndarray, pos_BT: jnp.ndarray) -> jnp.ndarray:
        kind = self.config.positional
        if kind not in ADDITIVE:
            return x_BTD
        if kind == "sinusoidal":
            table_LD = jnp.asarray(sinusoidal_table(self.config.max_len, x_BTD.shape[-1]))
            signal_BTD = table_LD[pos_BT]
        elif kind == "learned":
            table = nn.Embed(
                self.config.max_len,
                x_BTD.shape[-1],
                embedding_init=nn.initializers.normal(stddev=0.02),
                name="table",
            )
            signal_BTD = table(pos_BT)
        else:  # index: the lecture's counter-example, raw positions 1, 2, 3, ... (NTHU slide 22).
            signal_BTD = jnp.broadcast_to((pos_BT + 1)[..., None], x_BTD.shape)
        return x_BTD + signal_BTD.astype(x_BTD.dtype)
