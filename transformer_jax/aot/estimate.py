"""Roofline estimates of a compiled program on a chip, and the model FLOPs MFU counts.

A program takes at least as long as its arithmetic at the chip's peak (XLA's FLOP count over the
peak FLOP/s) and at least as long as its memory traffic at the chip's HBM bandwidth (XLA's bytes
accessed over the bandwidth); the estimate is the larger of the two. It ignores communication
between chips, kernel launch and host overheads and imperfect overlap, so a real step is
slower: it is a bound, whose error on hardware we have is measured by
benchmarks/roofline_check.py (docs/accelerators.md).
"""

import dataclasses

from transformer_jax.aot.chips import Chip
from transformer_jax.config import ModelConfig


def model_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Training FLOPs per token of a decoder-only model: 6 N + 12 L T (N_heads H).

    N counts the weights of every matrix multiply (attention projections, feed-forward, output
    layer; not the embedding lookup, biases or norms); 6 = 2 (multiply-add) x 3 (forward, and a
    backward twice as costly). 12 L T N_heads H is attention's QK^T and AV over the whole T x T
    square, the PaLM paper's convention (appendix B), which ignores that causal masking could
    skip half of it.
    """
    if cfg.family != "decoder_only":
        raise ValueError(f"model.family={cfg.family!r}: FLOPs are counted for decoder_only only")
    attention, ffn = cfg.attention, cfg.ffn
    inner, kv_inner = attention.num_heads * cfg.head_dim, attention.kv_heads * cfg.head_dim
    ffn_matrices = 3 if ffn.activation == "swiglu" else 2
    per_layer = cfg.d_model * (2 * inner + 2 * kv_inner) + ffn_matrices * cfg.d_model * ffn.d_ff
    matmul_weights = cfg.num_decoder_layers * per_layer + cfg.d_model * cfg.vocab_size
    attention = 12 * cfg.num_decoder_layers * seq_len * inner
    return 6 * matmul_weights + attention


@dataclasses.dataclass(frozen=True)
class Estimate:
    seconds: float  # roofline time of one call
    compute_seconds: float  # FLOPs / peak
    memory_seconds: float  # bytes accessed / bandwidth
    tokens_per_s: float  # all chips
    mfu_bound: float  # model FLOPs (or XLA's when there is no model count) / (time x peak)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"


def roofline(
    flops: float,
    bytes_accessed: float,
    chip: Chip,
    *,
    tokens: int,
    model_flops: float | None = None,
) -> Estimate:
    """Estimate of a program with per-chip `flops` and `bytes_accessed` processing `tokens`
    (all chips); `model_flops` per chip for the MFU bound, else XLA's `flops` stand in."""
    compute = flops / chip.peak_flops
    memory = bytes_accessed / chip.hbm_bandwidth
    seconds = max(compute, memory)
    useful = flops if model_flops is None else model_flops
    return Estimate(
        seconds=seconds,
        compute_seconds=compute,
        memory_seconds=memory,
        tokens_per_s=tokens / seconds if seconds else 0.0,
        mfu_bound=useful / (seconds * chip.peak_flops) if seconds else 0.0,
    )
