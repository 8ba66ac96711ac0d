"""Splash attention: the Pallas TPU kernel that never materialises the (T, S) score matrix
(jax/experimental/pallas/ops/tpu/splash_attention, the kernel MaxText trains with).

Shape letters as in layers/attention.py. The kernel takes its mask as structure, not as a
(B, N, T, S) array: a static causal-or-full pattern per head, and-ed with segment ids (a query
sees a key only where their ids are equal). The stack's self-attention mask (padding, causal by
index, packed documents) and the encoder-decoder cross-attention mask (the encoder's padding) are
both of that form: layers/masks.py `self_attention_segments` / `cross_attention_segments` build
the ids.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash

# Block sizes tried, largest first: the kernel tiles both sequence axes in blocks of these many
# tokens, and a kv block must be a multiple of the TPU's 128 lanes, so 128 is the smallest.
BLOCKS = (512, 256, 128)


def block_for(length: int) -> int | None:
    """The largest of BLOCKS that divides `length` (the kernel's tiling), or None."""
    return next((block for block in BLOCKS if length % block == 0), None)


def fits(q_len: int, kv_len: int) -> bool:
    """Whether the kernel can tile these lengths (each a multiple of the smallest block)."""
    return block_for(q_len) is not None and block_for(kv_len) is not None


@functools.lru_cache(maxsize=64)
def _kernel(num_heads: int, q_len: int, kv_len: int, causal: bool, interpret: bool):
    """One example's kernel (N, T, H) x (K, S, H) -> (N, T, H), forward and backward blocks the
    same (block_for each length). Cached: the mask's block tables are built with NumPy."""
    pattern = splash.CausalMask if causal else splash.FullMask
    mask = splash.MultiHeadMask([pattern((q_len, kv_len)) for _ in range(num_heads)])
    block_q, block_kv = block_for(q_len), block_for(kv_len)
    blocks = splash.BlockSizes(
        block_q=block_q,
        block_kv=block_kv,
        block_kv_compute=block_kv,
        block_q_dkv=block_q,
        block_kv_dkv=block_kv,
        block_kv_dkv_compute=block_kv,
        block_q_dq=block_q,
        block_kv_dq=block_kv,
    )
    return splash.make_splash_mha(
        mask, block_sizes=blocks, head_shards=1, q_seq_shards=1, interpret=interpret
    )


def splash_attention(
    q_BTNH,
    k_BSKH,
    v_BSKH,
    *,
    scale,
    q_segments_BT,
    kv_segments_BS,
    causal: bool,
    interpret: bool = False,
) -> jnp.ndarray:
    """softmax(Q K^T * scale, masked) V with the splash kernel. -> (B, T, N, H).

    `scale` (a float or one value per head, (N,)) multiplies q before the kernel, which does not
    scale; a query sees a key where their segment ids are equal and, with `causal`, the key's
    index is at most the query's. K < N (grouped-query attention) is the kernel's own. T and S
    must be multiples of 128 (`fits`). `interpret`: run the kernel in Pallas's interpreter, on
    any backend (tests on a CPU)."""
    _, q_len, num_heads, _ = q_BTNH.shape
    kv_len = k_BSKH.shape[1]
    if not fits(q_len, kv_len):
        raise ValueError(
            f"splash attention needs sequence lengths that are multiples of {BLOCKS[-1]}; "
            f"got queries {q_len}, keys {kv_len}"
        )
    scale_1N11 = jnp.reshape(jnp.asarray(scale, jnp.float32), (1, -1, 1, 1))
    q_BNTH = (jnp.swapaxes(q_BTNH, 1, 2) * scale_1N11).astype(q_BTNH.dtype)
    k_BKSH, v_BKSH = jnp.swapaxes(k_BSKH, 1, 2), jnp.swapaxes(v_BSKH, 1, 2)
    kernel = _kernel(num_heads, q_len, kv_len, causal, interpret)
    segments = splash.SegmentIds(q=q_segments_BT, kv=kv_segments_BS)
    out_BNTH = jax.vmap(kernel)(q_BNTH, k_BKSH, v_BKSH, segment_ids=segments)
    return jnp.swapaxes(out_BNTH, 1, 2)
