"""PyTorch's causal attention on a CPU: its fused kernel against its math path, one layer.

  python -m benchmarks.torch_attention_kernels

`F.scaled_dot_product_attention` picks its fused flash-attention kernel on a CPU only without
attention dropout; with dropout it takes the math path (scores, softmax, dropout, matmul).
The PyTorch reference of benchmarks/train_speed.py therefore changes kernels when
`model.attention.dropout_rate` goes to 0, which the JAX step (XLA:CPU has no fused attention
kernel) cannot follow. This times forward and backward of one layer's causal attention at the
`small` preset's shape (batch 32, 4 heads, 128 positions, head dimension 32), each kernel forced
by `torch.nn.attention.sdpa_kernel`, the two alternating: medians of 30 calls after 5, per round.
"""

import time

from absl import app, flags

_BATCH = flags.DEFINE_integer("batch", 32, "Sequences per call.")
_HEADS = flags.DEFINE_integer("heads", 4, "Attention heads.")
_LENGTH = flags.DEFINE_integer("length", 128, "Positions.")
_HEAD_DIM = flags.DEFINE_integer("head_dim", 32, "Dimension of a head.")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Rounds of (fused, math).")
_THREADS = flags.DEFINE_integer("threads", 2, "torch.set_num_threads.")


def _median_ms(attention, backend, q, k, v, calls=30, warmup=5) -> float:
    from torch.nn.attention import sdpa_kernel

    def call():
        attention(q, k, v, is_causal=True).sum().backward()

    with sdpa_kernel(backend):
        for _ in range(warmup):
            call()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] * 1e3


def main(argv):
    del argv
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.set_num_threads(_THREADS.value)
    shape = (_BATCH.value, _HEADS.value, _LENGTH.value, _HEAD_DIM.value)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    print(f"pytorch {torch.__version__} ({_THREADS.value} threads), causal attention {shape}")
    outputs = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):  # the same function?
        with torch.no_grad(), sdpa_kernel(backend):
            outputs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    print(f"max |fused - math| output: {(outputs[0] - outputs[1]).abs().max().item():.2e}")
    for _ in range(_ROUNDS.value):
        fused = _median_ms(F.scaled_dot_product_attention, SDPBackend.FLASH_ATTENTION, q, k, v)
        math = _median_ms(F.scaled_dot_product_attention, SDPBackend.MATH, q, k, v)
        print(f"fused {fused:.2f} ms, math {math:.2f} ms (one layer, forward and backward)")


if __name__ == "__main__":
    app.run(main)
