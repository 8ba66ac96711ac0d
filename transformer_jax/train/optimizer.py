"""Learning-rate schedules and optimizers built from a `TrainConfig` (validated there).

Step convention: optax calls a schedule with `count`, the number of updates already
applied (0 for the first update). Every schedule here is written in terms of
`step = count + 1` (the paper counts steps from 1), so the first update never has a
learning rate of exactly 0 and `warmup_steps=0` needs no special case at step 1.

The optimizer is wrapped in `optax.inject_hyperparams`, so after an update
`opt_state.hyperparams["learning_rate"]` holds the learning rate that update used;
`current_learning_rate(opt_state)` reads it for logging.

Run groups (train/seed_group.py) train members that differ in the `GROUP_SCALARS` as one
vmapped program: `make_optimizer(..., scalars=...)` takes those fields as traced per-member
values, so every schedule and transformation below accepts a number or a traced array (a
traced one never chooses a Python branch: `_traced`). Adam's b1, b2, eps and the weight decay are
injected hyperparameters, read from each member's own optimizer state; the learning rate,
warmup and clipping norm are closed over by the update and so are passed to it.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from transformer_jax.config import TrainConfig
from transformer_jax.train.group_fields import GROUP_SCALARS


def _rsqrt(scale: Any, d_model: int, warmup: Any) -> optax.Schedule:
    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        decay = jax.lax.rsqrt(step)
        if _traced(warmup):  # W = 0 drops the warmup term; the max keeps the power finite.
            ramp = jnp.minimum(decay, step * jnp.maximum(warmup, 1) ** -1.5)
            decay = jnp.where(warmup > 0, ramp, decay)
        elif warmup > 0:
            decay = jnp.minimum(decay, step * warmup**-1.5)
        return scale * d_model**-0.5 * decay

    return schedule


def _warmup(peak: Any, warmup: Any, step: jax.Array) -> jax.Array:
    if _traced(warmup):  # W = 0: step / 1 >= 1 at every step, so the ramp is the peak itself.
        return peak * jnp.minimum(step / jnp.maximum(warmup, 1), 1.0)
    if warmup == 0:
        return jnp.full_like(step, peak)
    return peak * jnp.minimum(step / warmup, 1.0)


def _traced(value: Any) -> bool:
    """A run group's per-member value (an array, traced in its step), not a number: it cannot
    choose a branch. Numbers keep the branches, so a solo run's program is the one it always
    was (XLA fuses another program differently, which moves its results by rounding)."""
    return isinstance(value, jax.Array)


def _cosine(peak: Any, warmup: Any, steps: int) -> optax.Schedule:
    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        progress = jnp.clip((step - warmup) / (steps - warmup), 0.0, 1.0)
        cosine = peak * 0.5 * (1.0 + jnp.cos(math.pi * progress))
        return jnp.where(step <= warmup, _warmup(peak, warmup, step), cosine)

    return schedule


def _constant(peak: Any, warmup: Any) -> optax.Schedule:
    def schedule(count):
        return _warmup(peak, warmup, jnp.asarray(count, jnp.float32) + 1.0)

    return schedule


def make_schedule(
    train_config: TrainConfig, d_model: int, scalars: dict | None = None
) -> optax.Schedule:
    """Returns the learning-rate schedule `count -> lr` named by `train.schedule`.

    With `step = count + 1` (steps counted from 1), `W = train.warmup_steps` and
    `lr = train.learning_rate`:
      * "rsqrt": Vaswani et al. 2017 §5.3, eq. 3:
        `lr * d_model**-0.5 * min(step**-0.5, step * W**-1.5)`. Here `learning_rate`
        is a dimensionless multiplier (1.0 reproduces the paper, whose peak for
        d_model=512, W=4000 is ~7e-4); with W=0 the warmup term is dropped.
      * "cosine": linear warmup `lr * step / W` up to `lr` at step W, then cosine decay
        `lr * (1 + cos(pi * (step - W) / (steps - W))) / 2`, reaching 0 at step
        `train.steps` and staying at 0 afterwards. Needs W < steps.
      * "constant": `lr * min(step / W, 1)`; just `lr` when W=0.

    `scalars` may replace `learning_rate` and `warmup_steps` with traced values (a run group's
    member's: see the module docstring).
    """
    scalars = scalars or {}
    peak = scalars.get("learning_rate", float(train_config.learning_rate))
    warmup = scalars.get("warmup_steps", train_config.warmup_steps)
    match train_config.schedule:
        case "rsqrt":
            return _rsqrt(peak, d_model, warmup)
        case "cosine":
            return _cosine(peak, warmup, train_config.steps)
        case "constant":
            return _constant(peak, warmup)
    raise ValueError(f"unknown train.schedule {train_config.schedule!r}")


def decay_mask(params: Any) -> Any:
    """True for leaves that get weight decay: matrices, kernels and embedding tables.

    Biases (including the (heads, head_dim) biases of the attention projections), LayerNorm/
    RMSNorm scales and any other 1-D (or scalar) parameter are excluded, following common AdamW
    practice (e.g. nanoGPT, big_vision).
    """

    def decays(path, p) -> bool:
        return jnp.ndim(p) >= 2 and getattr(path[-1], "key", None) != "bias"

    return jax.tree_util.tree_map_with_path(decays, params)


def _adam_family(
    learning_rate: Any,
    b1: float,
    b2: float,
    eps: float,
    weight_decay: float,
    *,
    grad_clip_norm: Any,
    clips: bool,
    decoupled_decay: bool,
) -> optax.GradientTransformation:
    parts = []
    if clips:
        parts.append(optax.clip_by_global_norm(grad_clip_norm))
    if decoupled_decay:
        adam = optax.adamw(learning_rate, b1, b2, eps, weight_decay=weight_decay, mask=decay_mask)
    else:
        adam = optax.adam(learning_rate, b1, b2, eps)
    parts.append(adam)
    return optax.chain(*parts)


def _sgd(
    learning_rate: Any, momentum: float, *, grad_clip_norm: Any, clips: bool
) -> optax.GradientTransformation:
    parts = []
    if clips:
        parts.append(optax.clip_by_global_norm(grad_clip_norm))
    parts.append(optax.sgd(learning_rate, momentum=momentum if momentum > 0 else None))
    return optax.chain(*parts)


def make_optimizer(
    train_config: TrainConfig, d_model: int, scalars: dict | None = None
) -> optax.GradientTransformation:
    """Returns the optimizer named by `train.optimizer`, with the schedule from `make_schedule`.

    * "adam": Adam (Kingma & Ba 2015) with `train.b1`, `train.b2`, `train.eps`
      (the paper: 0.9, 0.98, 1e-9). `train.weight_decay` must be 0.
    * "adamw": Adam with decoupled weight decay (Loshchilov & Hutter 2019) of
      `train.weight_decay`, applied only where `decay_mask` is True (not to biases,
      norm scales or other 1-D params). As in optax, the decay is scaled by the lr.
    * "sgd": plain SGD, with heavy-ball momentum `train.momentum` (0: none).
    Global-norm gradient clipping to `train.grad_clip_norm` runs first when it is > 0.

    The result is wrapped in `optax.inject_hyperparams`: read the lr used by the last
    update with `current_learning_rate(opt_state)`.

    `scalars`: `GROUP_SCALARS` fields given as traced values (a run group's member's), which
    replace those of `train_config`; whether the gradient is clipped at all stays
    `train_config`'s (a group's members all clip or none does).
    """
    t, scalars = train_config, scalars or {}
    value = {name: scalars.get(name, getattr(t, name)) for name in GROUP_SCALARS}
    schedule = make_schedule(t, d_model, scalars)
    # The clipping norm is closed over, not injected: the optimizer state keeps the structure
    # that checkpoints of every earlier run hold.
    static = ("grad_clip_norm", "clips")
    clip = {"grad_clip_norm": value["grad_clip_norm"], "clips": t.grad_clip_norm > 0}
    if t.optimizer == "sgd":
        factory = optax.inject_hyperparams(_sgd, static_args=(*static, "momentum"))
        return factory(learning_rate=schedule, momentum=t.momentum, **clip)
    factory = optax.inject_hyperparams(_adam_family, static_args=(*static, "decoupled_decay"))
    return factory(
        learning_rate=schedule,
        b1=value["b1"],
        b2=value["b2"],
        eps=value["eps"],
        weight_decay=value["weight_decay"],
        decoupled_decay=t.optimizer == "adamw",
        **clip,
    )


def current_learning_rate(opt_state: Any) -> jax.Array:
    """The learning rate the most recent update used (from `make_optimizer`'s state).

    Before any update it is the lr the first update will use.
    """
    return opt_state.hyperparams["learning_rate"]
