"""Learning-rate schedules and optimizers built from `config.train`.

One place maps `train.schedule` and `train.optimizer` strings to implementations
(`SCHEDULES`, `OPTIMIZERS`); unknown names raise a ValueError listing the valid ones.

Step convention: optax calls a schedule with `count`, the number of updates already
applied (0 for the first update). Every schedule here is written in terms of
`step = count + 1` (the paper counts steps from 1), so the first update never has a
learning rate of exactly 0 and `warmup_steps=0` needs no special case at step 1.

The optimizer is wrapped in `optax.inject_hyperparams`, so after an update
`opt_state.hyperparams["learning_rate"]` holds the learning rate that update used;
`current_learning_rate(opt_state)` reads it for logging.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

SCHEDULES = ("rsqrt", "cosine", "constant")
OPTIMIZERS = ("adam", "adamw", "sgd")

# Defaults for optional `config.train` fields: the paper's Adam settings
# (Vaswani et al. 2017 §5.3: beta1=0.9, beta2=0.98, eps=1e-9), no decay, no clipping.
_DEFAULTS = {
    "warmup_steps": 0,
    "b1": 0.9,
    "b2": 0.98,
    "eps": 1e-9,
    "weight_decay": 0.0,
    "grad_clip_norm": 0.0,
    "momentum": 0.0,
}


def _get(train_config: Any, name: str) -> Any:
    """Reads `train.<name>`; optional fields fall back to `_DEFAULTS`."""
    if name in train_config:
        return train_config[name]
    if name in _DEFAULTS:
        return _DEFAULTS[name]
    raise ValueError(f"config.train.{name} is required but missing")


def _check(ok: bool, name: str, value: Any, valid: str) -> None:
    if not ok:
        raise ValueError(f"config.train.{name}={value!r} is invalid; expected {valid}")


def _rsqrt(scale: float, d_model: int, warmup: int) -> optax.Schedule:
    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        decay = jax.lax.rsqrt(step)
        if warmup > 0:
            decay = jnp.minimum(decay, step * warmup**-1.5)
        return scale * d_model**-0.5 * decay

    return schedule


def _warmup(peak: float, warmup: int, step: jax.Array) -> jax.Array:
    if warmup == 0:
        return jnp.full_like(step, peak)
    return peak * jnp.minimum(step / warmup, 1.0)


def _cosine(peak: float, warmup: int, steps: int) -> optax.Schedule:
    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        progress = jnp.clip((step - warmup) / (steps - warmup), 0.0, 1.0)
        cosine = peak * 0.5 * (1.0 + jnp.cos(math.pi * progress))
        return jnp.where(step <= warmup, _warmup(peak, warmup, step), cosine)

    return schedule


def _constant(peak: float, warmup: int) -> optax.Schedule:
    def schedule(count):
        return _warmup(peak, warmup, jnp.asarray(count, jnp.float32) + 1.0)

    return schedule


def make_schedule(train_config: Any, d_model: int) -> optax.Schedule:
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
    """
    name = _get(train_config, "schedule")
    peak = _get(train_config, "learning_rate")
    warmup = _get(train_config, "warmup_steps")
    steps = _get(train_config, "steps")
    _check(name in SCHEDULES, "schedule", name, f"one of {SCHEDULES}")
    _check(isinstance(steps, int) and steps > 0, "steps", steps, "an int > 0")
    _check(isinstance(warmup, int) and warmup >= 0, "warmup_steps", warmup, "an int >= 0")
    _check(isinstance(peak, int | float) and peak > 0, "learning_rate", peak, "a number > 0")
    if not (isinstance(d_model, int) and d_model > 0):
        raise ValueError(f"d_model={d_model!r} is invalid; expected an int > 0")
    peak = float(peak)
    if name == "rsqrt":
        return _rsqrt(peak, d_model, warmup)
    if name == "cosine":
        _check(warmup < steps, "warmup_steps", warmup, f"< train.steps={steps} for cosine")
        return _cosine(peak, warmup, steps)
    return _constant(peak, warmup)


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
    grad_clip_norm: float,
    decoupled_decay: bool,
) -> optax.GradientTransformation:
    parts = []
    if grad_clip_norm > 0:
        parts.append(optax.clip_by_global_norm(grad_clip_norm))
    if decoupled_decay:
        adam = optax.adamw(learning_rate, b1, b2, eps, weight_decay=weight_decay, mask=decay_mask)
    else:
        adam = optax.adam(learning_rate, b1, b2, eps)
    parts.append(adam)
    return optax.chain(*parts)


def _sgd(
    learning_rate: Any, momentum: float, *, grad_clip_norm: float
) -> optax.GradientTransformation:
    parts = []
    if grad_clip_norm > 0:
        parts.append(optax.clip_by_global_norm(grad_clip_norm))
    parts.append(optax.sgd(learning_rate, momentum=momentum if momentum > 0 else None))
    return optax.chain(*parts)


def make_optimizer(train_config: Any, d_model: int) -> optax.GradientTransformation:
    """Returns the optimizer named by `train.optimizer`, with the schedule from `make_schedule`.

    * "adam": Adam (Kingma & Ba 2015) with `train.b1`, `train.b2`, `train.eps`
      (the paper: 0.9, 0.98, 1e-9). `train.weight_decay` must be 0.
    * "adamw": Adam with decoupled weight decay (Loshchilov & Hutter 2019) of
      `train.weight_decay`, applied only where `decay_mask` is True (not to biases,
      norm scales or other 1-D params). As in optax, the decay is scaled by the lr.
    * "sgd": plain SGD, with heavy-ball momentum `train.momentum` (optional, default 0).
    Global-norm gradient clipping to `train.grad_clip_norm` runs first when it is > 0.

    The result is wrapped in `optax.inject_hyperparams`: read the lr used by the last
    update with `current_learning_rate(opt_state)`.
    """
    name = _get(train_config, "optimizer")
    _check(name in OPTIMIZERS, "optimizer", name, f"one of {OPTIMIZERS}")
    schedule = make_schedule(train_config, d_model)
    clip = _get(train_config, "grad_clip_norm")
    _check(isinstance(clip, int | float) and clip >= 0, "grad_clip_norm", clip, "a number >= 0")
    weight_decay = _get(train_config, "weight_decay")
    _check(
        isinstance(weight_decay, int | float) and weight_decay >= 0,
        "weight_decay",
        weight_decay,
        "a number >= 0",
    )
    if name != "adamw":
        _check(weight_decay == 0, "weight_decay", weight_decay, f"0.0 for optimizer {name!r}")

    if name == "sgd":
        momentum = _get(train_config, "momentum")
        _check(0 <= momentum < 1, "momentum", momentum, "a number in [0, 1)")
        factory = optax.inject_hyperparams(_sgd, static_args=("momentum", "grad_clip_norm"))
        return factory(learning_rate=schedule, momentum=momentum, grad_clip_norm=clip)

    b1, b2, eps = (_get(train_config, k) for k in ("b1", "b2", "eps"))
    _check(0 <= b1 < 1, "b1", b1, "a number in [0, 1)")
    _check(0 <= b2 < 1, "b2", b2, "a number in [0, 1)")
    _check(eps > 0, "eps", eps, "a number > 0")
    factory = optax.inject_hyperparams(
        _adam_family, static_args=("grad_clip_norm", "decoupled_decay")
    )
    return factory(
        learning_rate=schedule,
        b1=b1,
        b2=b2,
        eps=eps,
        weight_decay=weight_decay,
        grad_clip_norm=clip,
        decoupled_decay=name == "adamw",
    )


def current_learning_rate(opt_state: Any) -> jax.Array:
    """The learning rate the most recent update used (from `make_optimizer`'s state).

    Before any update it is the lr the first update will use.
    """
    return opt_state.hyperparams["learning_rate"]
