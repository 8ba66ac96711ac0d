"""How many members of a run group (train/seed_group.py) train as one program.

A group's state and activations grow with its members. The rule: on a device that reports its
memory (`Device.memory_stats()["bytes_limit"]`: GPUs, TPUs), a group whose compiled step needs
more than `MEMORY_FRACTION` of it is halved, and halved again, until a part fits (or has one
member); the parts train one after the other. What a step needs is the compiler's own account,
`compiled.memory_analysis()`: arguments and outputs (less what donation aliases), temporaries
and code, as transformer_jax.aot reports a program's peak. A CPU reports no limit: its groups
train whole. `train.seed_group.train_run_group(max_group_size=...)` caps the parts instead.
"""

from collections.abc import Callable

import jax

# Of the device's memory, what a group's step may take: the rest is the evaluation programs',
# the allocator's and the runtime's.
MEMORY_FRACTION = 0.8


def device_memory_limit(device: jax.Device | None = None) -> int | None:
    """Bytes the device may allocate; None where it does not say (a CPU)."""
    stats = (device or jax.devices()[0]).memory_stats()
    return stats.get("bytes_limit") if stats else None


def compiled_bytes(compiled) -> int:
    """Peak bytes of a compiled program by the compiler's memory analysis."""
    m = compiled.memory_analysis()
    return (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
        + m.generated_code_size_in_bytes
    )


def fitting_size(num_members: int, bytes_of: Callable[[int], int], limit: int | None) -> int:
    """The members per part: `num_members` halved (rounding up) until `bytes_of(size)`, the
    step of a part of `size` members, fits `MEMORY_FRACTION` of `limit`; at least 1, and
    `num_members` when `limit` is None."""
    size = num_members
    while limit is not None and size > 1 and bytes_of(size) > MEMORY_FRACTION * limit:
        size = -(-size // 2)
    return size
