"""Whether a beam search fits: its key-value cache and scores against the device's free memory.

A beam search keeps batch x beam_size hypotheses, each with a key-value cache of every decoder
layer over the whole output length (and, for an encoder-decoder, the projected source), and
scores batch x beam_size x vocabulary candidates per step. A beam too wide for the memory would
otherwise be found out by the kernel's OOM killer (exit 137, no message) or an allocation error
deep in XLA; the estimate is taken from the shapes alone (jax.eval_shape), before anything is
allocated.
"""

import jax
import jax.numpy as jnp

from transformer_jax.decoding.steps import cached_step
from transformer_jax.families import check_decodable

_GIB = 2**30


def beam_bytes(model, variables, inputs_BS, beam_size: int, length: int) -> int:
    """Bytes of a beam search's key-value cache plus two float32 score tables (the step's
    logits and the candidates' log-probabilities), for `inputs_BS` and `length` decoder
    positions; a lower bound of what the search holds."""
    rows = inputs_BS.shape[0] * beam_size
    source = None
    if check_decodable(model.config).decodes == "source":
        source = jax.ShapeDtypeStruct((rows, inputs_BS.shape[1]), jnp.int32)

    def cache(variables, source):
        return cached_step(model, variables, batch_size=rows, length=length, inputs_BS=source)[1]

    shapes = jax.eval_shape(cache, variables, source)
    cache_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
    return cache_bytes + 2 * rows * model.config.vocab_size * 4


def available_bytes(device: jax.Device) -> int | None:
    """Free memory of `device`: the host's MemAvailable for the CPU, the allocator's limit less
    what is in use for an accelerator; None when it cannot be told."""
    if device.platform == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None
    stats = device.memory_stats() or {}
    if "bytes_limit" not in stats:
        return None
    return stats["bytes_limit"] - stats.get("bytes_in_use", 0)


def check_beam_fits(model, variables, inputs_BS, beam_size: int, length: int) -> None:
    """Raises a ValueError with the estimate when the beam search cannot fit in the free memory
    of the first device, naming the widest beam that would."""
    device = jax.devices()[0]
    free = available_bytes(device)
    if free is None:
        return
    need = beam_bytes(model, variables, inputs_BS, beam_size, length)
    if need <= free:
        return
    # The estimate is linear in the beam size: the widest that fits, from the estimate of one.
    widest = free // max(1, beam_bytes(model, variables, inputs_BS, 1, length))
    raise ValueError(
        f"beam_size={beam_size} needs at least {need / _GIB:.1f} GiB for its key-value cache "
        f"and scores ({inputs_BS.shape[0] * beam_size} hypotheses x {length} positions), more "
        f"than the {free / _GIB:.1f} GiB free on {device.platform}; valid: beam_size <= "
        f"{max(1, widest)}"
    )
