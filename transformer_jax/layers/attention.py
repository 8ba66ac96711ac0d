"""Scaled dot-product and multi-head attention (Vaswani et al. 2017 §3.2; NTHU slides 12-36).

Shape letters (transformer_jax/__init__.py): B batch, T query length, S key length, N query
heads, K key-value heads (K divides N; K < N is grouped-query attention), G = N // K, H head
dimension, D d_model.
"""

import dataclasses
import math
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax import fields as F
from transformer_jax.layers import positional, splash
from transformer_jax.layers.positional import PositionalConfig
from transformer_jax.registry import Registry

# Finite, so that a fully masked row (a padding query) gives a uniform average, not NaN.
_MASKED = float(jnp.finfo(jnp.float32).min)


def attention_logits(q_BTNH, k_BSKH, scale) -> jnp.ndarray:
    """q . k * scale in float32. `scale` is a float or one value per head (N,). -> (B, N, T, S)."""
    batch, q_len, num_heads, head_dim = q_BTNH.shape
    kv_heads = k_BSKH.shape[2]
    q_BTKGH = q_BTNH.reshape(batch, q_len, kv_heads, num_heads // kv_heads, head_dim)
    logits_BKGTS = jnp.einsum(
        "btkgh,bskh->bkgts", q_BTKGH, k_BSKH, preferred_element_type=jnp.float32
    )
    logits_BNTS = logits_BKGTS.reshape(batch, num_heads, q_len, k_BSKH.shape[1])
    return logits_BNTS * _per_head(scale)


def attention_weights(logits_BNTS, *, mask=None, bias=None) -> jnp.ndarray:
    """softmax(logits + bias) over keys, masked keys set to -inf first; float32. -> (B,N,T,S)."""
    logits_BNTS = logits_BNTS.astype(jnp.float32)
    if bias is not None:
        logits_BNTS = logits_BNTS + bias
    if mask is not None:
        logits_BNTS = jnp.where(mask, logits_BNTS, _MASKED)
    return jax.nn.softmax(logits_BNTS, axis=-1)


def combine_values(probs_BNTS, v_BSKH) -> jnp.ndarray:
    """sum_j alpha_ij v_j for every head. -> (B, T, N, H)."""
    batch, num_heads, q_len, k_len = probs_BNTS.shape
    kv_heads = v_BSKH.shape[2]
    probs_BKGTS = probs_BNTS.reshape(batch, kv_heads, num_heads // kv_heads, q_len, k_len)
    out_BTKGH = jnp.einsum("bkgts,bskh->btkgh", probs_BKGTS.astype(v_BSKH.dtype), v_BSKH)
    return out_BTKGH.reshape(batch, q_len, num_heads, v_BSKH.shape[-1])


def dot_product_attention(
    q_BTNH,
    k_BSKH,
    v_BSKH,
    *,
    scale=None,
    mask=None,
    bias=None,
    impl: str = "einsum",
) -> jnp.ndarray:
    """softmax(Q K^T * scale + bias, masked) V, with scale defaulting to 1/sqrt(d_k). -> (B,T,N,H).

    `impl="einsum"` is the readable reference; `impl="jax"` calls jax.nn.dot_product_attention
    (its XLA path), `impl="cudnn"` the same asking for cuDNN's fused kernel (GPUs only). All
    compute the softmax in float32 and agree to rounding.
    `mask` is boolean, broadcastable to (B, N, T, S); `bias` is additive, (B|1, N, T, S).
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q_BTNH.shape[-1])
    if impl == "einsum":
        probs = attention_weights(attention_logits(q_BTNH, k_BSKH, scale), mask=mask, bias=bias)
        return combine_values(probs, v_BSKH)
    if impl in ("jax", "cudnn"):
        if not isinstance(scale, float):  # Per-head scales: fold into q, which is equivalent.
            scale_11N1 = jnp.asarray(scale, jnp.float32)[None, None, :, None]
            q_BTNH = (q_BTNH * scale_11N1).astype(q_BTNH.dtype)
            scale = 1.0
        return jax.nn.dot_product_attention(
            q_BTNH,
            k_BSKH,
            v_BSKH,
            bias=bias,
            mask=mask,
            scale=scale,
            implementation="cudnn" if impl == "cudnn" else None,
        )
    raise ValueError(
        f"attention impl={impl!r} is not valid; choose one of ['einsum', 'jax', 'cudnn']"
    )


CAUSAL_BLOCK = 64  # Query rows per block of `causal_blocked_attention`.


def causal_blocked_attention(
    q_BTNH, k_BSKH, v_BSKH, *, scale, mask=None, bias=None, block: int = CAUSAL_BLOCK
) -> jnp.ndarray:
    """The einsum attention for causal self-attention, one block of `block` queries at a time,
    each against only the keys up to its last query. -> (B, T, N, H).

    The keys skipped are exactly those after every query of the block, which a causal mask hides
    anyway, so the result equals the full computation (up to float rounding); the T x T work
    shrinks by about (1 - 1/n_blocks) / 2.
    Needs self-attention (S = T) whose mask hides every key after its query by index, as the
    position-built causal mask of a stack does. `mask` (B|1, 1|N, T, T), `bias` (B|1, N, T, T).
    """
    length = q_BTNH.shape[1]
    outputs = []
    for start in range(0, length, block):
        end = min(start + block, length)
        block_mask, block_bias = (_block(x, start, end) for x in (mask, bias))
        logits_BNtS = attention_logits(q_BTNH[:, start:end], k_BSKH[:, :end], scale)
        probs_BNtS = attention_weights(logits_BNtS, mask=block_mask, bias=block_bias)
        outputs.append(combine_values(probs_BNtS, v_BSKH[:, :end]))
    return jnp.concatenate(outputs, axis=1)


def _block(x, start: int, end: int):
    """Query rows start:end and keys :end of a mask or bias (..., T|1, S); None stays None."""
    if x is None:
        return None
    rows = slice(start, end) if x.shape[-2] > 1 else slice(None)
    return x[..., rows, :end]


IMPLS = ("auto", "einsum", "jax", "cudnn", "splash")


def resolve_impl(impl: str, platform: str | None = None, *, splash_ok: bool = True) -> str:
    """`model.attention.impl="auto"` for `platform` (a jax platform name, "cpu", "gpu", "tpu";
    None: this process's default backend): the einsum path (with causal blocks) on CPUs, where
    XLA's generic `jax.nn.dot_product_attention` takes 1.18x the step time (results/speed/
    switch_costs.md); on GPUs `jax.nn.dot_product_attention` asking for cuDNN's fused kernel
    ("cudnn"); on TPUs the splash kernel where the model allows it (`splash_ok`: no logit bias,
    window or attention dropout, one chip; config/model.py `splash_refusal`), else
    `jax.nn.dot_product_attention`. The trainer resolves it for the devices it compiles for
    (train/trainer.py `prepare`), so a program compiled on a CPU for a TPU takes the TPU's
    path. Every call then picks its kernel from its shapes: `kernel_for`."""
    if impl != "auto":
        return impl
    platform = jax.default_backend() if platform is None else platform
    if platform == "tpu":
        return "splash" if splash_ok else "jax"
    return {"cpu": "einsum", "gpu": "cudnn"}.get(platform, "jax")


# cuDNN's fused attention (jax/_src/cudnn/fused_attention_stablehlo.py check_is_flash_attention):
# half-precision inputs, a head dimension that is a multiple of 8 up to 128 (256 from Hopper
# on), and with a mask (which it takes as a bias) even sequence lengths in training.
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128


def kernel_for(impl: str, *, dtype, q_len: int, kv_len: int, head_dim: int, segments: bool):
    """The kernel one attention call runs, from the resolved `impl` (`resolve_impl`; "auto" is
    resolved for this process's backend) and the call's shapes: "einsum", "xla" (jax.nn.
    dot_product_attention's XLA path), "cudnn" or "splash".

    "cudnn" where cuDNN takes the dtype and shapes, else "xla"; "splash" where the mask is given
    as segment ids (`segments`: a stack's self-attention or an encoder-decoder's cross-attention,
    not incremental decoding) and both lengths are multiples of a block (layers/splash.py
    `fits`), else "xla". A pure function of the platform (through `impl`), dtype and shapes."""
    impl = resolve_impl(impl)
    if impl == "cudnn":
        cudnn_ok = (
            jnp.dtype(dtype).name in CUDNN_DTYPES
            and head_dim % 8 == 0
            and head_dim <= CUDNN_MAX_HEAD_DIM
            and q_len % 2 == 0
            and kv_len % 2 == 0
        )
        return "cudnn" if cudnn_ok else "xla"
    if impl == "splash":
        return "splash" if segments and splash.fits(q_len, kv_len) else "xla"
    return "xla" if impl == "jax" else impl


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """Multi-head attention: logits = q.k * scale (Vaswani §3.2; NCCU slides 31-33)."""

    PREFIX: ClassVar[str] = "model.attention"

    num_heads: int = 4
    num_kv_heads: int = 0  # 0: as many as num_heads. Fewer: grouped-query (1: multi-query).
    # sqrt_dk: 1/sqrt(d_k); none: 1; constant: 1/temperature; learned: 1/tau_h with a learned
    # tau per head, initialised to sqrt(d_k). See SCALES below.
    scale: str = "sqrt_dk"
    temperature: float = math.sqrt(9487)  # tau for scale="constant" (NCCU slide 33)
    # auto: einsum on CPUs (faster there), cudnn on GPUs, splash on a TPU chip where the model
    # allows (else jax); jax: jax.nn.dot_product_attention (XLA); cudnn: the same asking for
    # cuDNN's fused kernel where dtype and shapes allow; splash: the Pallas TPU kernel where the
    # call allows (layers/splash.py); einsum: the readable reference. The same math to rounding.
    impl: str = "auto"
    sliding_window: int = 0  # 0: full attention; w >= 1: Longformer-style local window
    num_global_tokens: int = 0  # leading positions that attend and are attended everywhere
    dropout_rate: float = 0.0  # on the attention weights
    # Biases of W_q, W_k, W_v and W_o (False: Llama's attention_bias=False).
    use_bias: bool = True

    def __post_init__(self):
        p = self.PREFIX
        F.check_int(f"{p}.num_heads", self.num_heads, 1)
        F.check_int(f"{p}.num_kv_heads", self.num_kv_heads, 0)
        F.check_choice(f"{p}.scale", self.scale, SCALES.names())
        F.check_choice(f"{p}.impl", self.impl, IMPLS)
        F.check_int(f"{p}.sliding_window", self.sliding_window, 0)
        F.check_int(f"{p}.num_global_tokens", self.num_global_tokens, 0)
        F.check_float(f"{p}.dropout_rate", self.dropout_rate, at_least=0.0, below=1.0)
        F.check_float(f"{p}.temperature", self.temperature, above=0.0)
        F.check_bool(f"{p}.use_bias", self.use_bias)
        if self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{p}.num_kv_heads={self.num_kv_heads} must divide {p}.num_heads="
                f"{self.num_heads}; valid: 0 (same as num_heads) or one of "
                f"{F.divisors(self.num_heads)}"
            )
        if self.num_global_tokens and not self.sliding_window:
            raise ValueError(
                f"{p}.num_global_tokens={self.num_global_tokens} only has a meaning with "
                f"sliding-window attention; set {p}.sliding_window >= 1 or use 0 global tokens"
            )

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads


# model.attention.scale -> the logit multiplier, from the module (which holds any parameter),
# its config and the head dimension d_k (NCCU slides 31-33).
SCALES: Registry = Registry("model.attention.scale")
SCALES.add("sqrt_dk", lambda module, config, head_dim: 1.0 / math.sqrt(head_dim))
SCALES.add("none", lambda module, config, head_dim: 1.0)
SCALES.add("constant", lambda module, config, head_dim: 1.0 / float(config.temperature))


@SCALES.register("learned")
def _learned_scale(module: nn.Module, config: AttentionConfig, head_dim: int):
    """1/tau_h, a learned temperature per head, log-parametrised so it stays positive;
    starts at sqrt(d_k)."""
    log_tau_N = module.param(
        "log_temperature",
        nn.initializers.constant(0.5 * math.log(head_dim)),
        (config.num_heads,),
        jnp.float32,
    )
    return jnp.exp(-log_tau_N)


def _per_head(scale) -> jnp.ndarray:
    """A scalar, or a (N,) vector shaped (1, N, 1, 1) to broadcast over (B, N, T, S)."""
    scale = jnp.asarray(scale, jnp.float32)
    return scale if scale.ndim == 0 else scale[None, :, None, None]


class MultiHeadAttention(nn.Module):
    """Separate W_q, W_k, W_v per head, heads concatenated and projected by W_o (§3.2.2).

    Self-attention applies rotary positions to q and k when configured; cross-attention
    (queries from the decoder, keys and values from the encoder) never does.

    Collections, both off unless made mutable by the caller, neither changes the output:
      "intermediates": the attention weights (B, N, T, S), for attention maps;
      "diagnostics": entropy, largest weight and logit std of this layer, for the reports.

    With `use_cache` (incremental decoding, NTHU slides 50-56) keys and values live in the
    "cache" collection as cached_key / cached_value (B, L, K, H). The first call creates them and
    is an ordinary forward pass: self-attention gets an empty cache as long as that call's input;
    cross-attention stores the encoder's projected keys and values, so they are computed once
    per sequence. Later self-attention calls write the new tokens' keys and values at
    `cache_index` and attend over the whole cache (the caller's mask hides unwritten slots);
    later cross-attention calls read the stored ones and ignore `x_kv_BSD`.
    """

    config: AttentionConfig
    positional: PositionalConfig = PositionalConfig()  # rotary rotates self-attention q and k
    dtype: str = "float32"  # compute dtype; the softmax stays float32
    self_attention: bool = True
    use_cache: bool = False
    # The mask hides every key after its query by index (a causal stack's self-attention): the
    # einsum path may then skip those keys (causal_blocked_attention).
    causal: bool = False

    @nn.compact
    def __call__(
        self,
        x_q_BTD,
        x_kv_BSD,
        *,
        mask=None,
        bias=None,
        segments=None,
        q_pos_BT=None,
        k_pos_BS=None,
        cache_index=None,
        train: bool = False,
    ):
        """(B, T, D) queries attend to (B, S, D) keys/values -> (B, T, D).

        `segments`: None, or the query (B, T) and key (B, S) segment ids whose equality, with
        causal order by index when `causal`, is exactly `mask` (layers/masks.py
        `self_attention_segments`): the splash kernel takes the mask in that form.

        `q_pos_BT` / `k_pos_BS` are the positions of the `x_q_BTD` / `x_kv_BSD` tokens (for rotary);
        with `use_cache`, `cache_index` (int32 scalar) is the cache slot of the first new token
        and `mask` / `bias` cover the whole cache, (B, 1|N, T, L).
        """
        cfg = self.config
        head_dim = x_q_BTD.shape[-1] // cfg.num_heads
        q_BTNH = self._dense(cfg.num_heads, head_dim, "query")(x_q_BTD)
        if self.self_attention:
            q_BTNH = positional.encoding(self.positional).rotate(q_BTNH, q_pos_BT)
        k_BSKH, v_BSKH = self._keys_values(x_kv_BSD, head_dim, k_pos_BS, cache_index)

        scale = SCALES[cfg.scale](self, cfg, head_dim)
        wants_weights = self.is_mutable_collection("intermediates") or (
            self.is_mutable_collection("diagnostics")
        )
        attention_dropout = train and cfg.dropout_rate > 0
        kernel = kernel_for(
            cfg.impl,
            dtype=q_BTNH.dtype,
            q_len=q_BTNH.shape[1],
            kv_len=k_BSKH.shape[1],
            head_dim=head_dim,
            segments=segments is not None and bias is None and not self.use_cache,
        )
        einsum = kernel == "einsum"
        if einsum and self.causal and not (wants_weights or attention_dropout or self.use_cache):
            out_BTNH = causal_blocked_attention(
                q_BTNH, k_BSKH, v_BSKH, scale=scale, mask=mask, bias=bias
            )
        elif wants_weights or attention_dropout or einsum:
            logits_BNTS = attention_logits(q_BTNH, k_BSKH, scale)
            probs_BNTS = attention_weights(logits_BNTS, mask=mask, bias=bias)
            if wants_weights:
                self._record(logits_BNTS, probs_BNTS, mask)
            probs_BNTS = nn.Dropout(cfg.dropout_rate)(probs_BNTS, deterministic=not train)
            out_BTNH = combine_values(probs_BNTS, v_BSKH)
        elif kernel == "splash":
            q_segments_BT, kv_segments_BS = segments
            out_BTNH = splash.splash_attention(
                q_BTNH,
                k_BSKH,
                v_BSKH,
                scale=scale,
                q_segments_BT=q_segments_BT,
                kv_segments_BS=kv_segments_BS,
                causal=self.causal,
            )
        else:
            out_BTNH = dot_product_attention(
                q_BTNH,
                k_BSKH,
                v_BSKH,
                scale=scale,
                mask=mask,
                bias=bias,
                impl="cudnn" if kernel == "cudnn" else "jax",
            )
        return nn.DenseGeneral(
            x_q_BTD.shape[-1],
            axis=(-2, -1),
            use_bias=self.config.use_bias,
            dtype=jnp.dtype(self.dtype),
            param_dtype=jnp.float32,
            name="out",
        )(out_BTNH)

    def _dense(self, heads: int, head_dim: int, name: str) -> nn.DenseGeneral:
        """A projection D -> (heads, H), the W_q / W_k / W_v of every head at once."""
        return nn.DenseGeneral(
            (heads, head_dim),
            use_bias=self.config.use_bias,
            dtype=jnp.dtype(self.dtype),
            param_dtype=jnp.float32,
            name=name,
        )

    def _keys_values(self, x_kv_BSD, head_dim, k_pos_BS, cache_index):
        """Keys and values (B, S, K, H); with `use_cache`, the whole cache (B, L, K, H)."""
        cfg = self.config
        cached = self.use_cache and self.has_variable("cache", "cached_key")
        if cached and not self.self_attention:  # Projected once, when the cache was created.
            cache = self.variables["cache"]
            return cache["cached_key"], cache["cached_value"]
        k_BSKH = self._dense(cfg.kv_heads, head_dim, "key")(x_kv_BSD)
        v_BSKH = self._dense(cfg.kv_heads, head_dim, "value")(x_kv_BSD)
        if self.self_attention:
            # Rotated before caching: a key's rotation depends only on its own position.
            k_BSKH = positional.encoding(self.positional).rotate(k_BSKH, k_pos_BS)
        if not self.use_cache:
            return k_BSKH, v_BSKH
        initial = jnp.zeros_like if self.self_attention else (lambda x: x)
        keys = self.variable("cache", "cached_key", initial, k_BSKH)
        values = self.variable("cache", "cached_value", initial, v_BSKH)
        if not cached:  # This call creates the cache: an ordinary forward pass.
            return k_BSKH, v_BSKH
        start = (0, cache_index, 0, 0)
        keys.value = jax.lax.dynamic_update_slice(keys.value, k_BSKH, start)
        values.value = jax.lax.dynamic_update_slice(values.value, v_BSKH, start)
        return keys.value, values.value

    def _record(self, logits_BNTS, probs_BNTS, mask):
        self.sow("intermediates", "attention_weights", probs_BNTS)
        entropy_BNT = -jnp.sum(probs_BNTS * jnp.log(jnp.maximum(probs_BNTS, 1e-30)), axis=-1)
        valid = (
            jnp.ones_like(logits_BNTS, bool)
            if mask is None
            else jnp.broadcast_to(mask, logits_BNTS.shape)
        )
        count = jnp.maximum(valid.sum(), 1)
        mean = jnp.sum(jnp.where(valid, logits_BNTS, 0.0)) / count
        var = jnp.sum(jnp.where(valid, (logits_BNTS - mean) ** 2, 0.0)) / count
        self.sow("diagnostics", "attention_entropy", jnp.mean(entropy_BNT))
        self.sow("diagnostics", "attention_max_prob", jnp.mean(jnp.max(probs_BNTS, axis=-1)))
        self.sow("diagnostics", "attention_logit_std", jnp.sqrt(var))
