"""Numerical health: global norms for logging and a host-side NaN/Inf check."""

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax


class NonFiniteError(FloatingPointError):
    """A metric went NaN or Inf; `step` and `what` (the metric names) say where."""

    def __init__(self, step: int, what: str):
        self.step = int(step)
        self.what = what
        super().__init__(f"non-finite {what} at step {self.step}")


def check_finite(step: int, metrics: Mapping[str, Any]) -> None:
    """Raises `NonFiniteError` naming every metric in `metrics` with a NaN/Inf value.

    Runs on the host (values are fetched with `np.asarray`), so call it on metrics the
    loop already pulls for logging rather than adding a device sync every step.
    """
    bad = [
        name
        for name, value in metrics.items()
        if not np.all(np.isfinite(np.asarray(value, dtype=np.float64)))
    ]
    if bad:
        raise NonFiniteError(step, ", ".join(sorted(bad)))


def tree_norm(tree: Any) -> jax.Array:
    """Global L2 norm over all leaves of `tree` (a float32 scalar).

    `optax.tree.norm` after casting leaves to float32, so bf16 gradients do not lose
    precision or overflow in the sum of squares. Used for grad/param/update norms.
    """
    return optax.tree.norm(jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), tree))
