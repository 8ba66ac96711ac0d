"""glibc malloc settings that stop XLA:CPU from page-faulting its temporaries in every step.

XLA:CPU allocates a step's temporary buffers (hundreds of MiB for a small Transformer) with
malloc and frees them when the step ends. glibc serves blocks that large with a fresh mmap()
(a thread's arena cannot hold them) and unmaps them on free, so every step touches every page
anew: tens of thousands of minor page faults per step of the small benchmark
(benchmarks/train_speed.py). With one arena, no mmap and a high trim threshold the freed blocks
stay in the heap and the next step reuses them, with a tenth of the faults.
"""

import ctypes
import ctypes.util
import sys

# mallopt(3) parameters, from glibc's malloc.h.
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_TRIM_THRESHOLD = 1 << 30  # Keep up to 1 GiB of freed memory at the top of the heap.


def reuse_freed_memory() -> bool:
    """Makes glibc keep freed blocks for reuse; True if applied (Linux with glibc only).

    Call it before JAX starts its threads (before the first computation): a thread that has
    already made an arena of its own keeps it. Costs resident memory equal to the largest step's
    temporaries, which the step needs anyway.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other libcs have no mallopt.
        return False
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return all(mallopt(parameter, value) == 1 for parameter, value in settings)
