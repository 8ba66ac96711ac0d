"""Losses and accuracy metrics as (sum, count) pairs, normalised on the host.

Following the flax wmt/lm1b examples, every function returns an un-normalised sum and
its denominator, so that sums over batches (and devices) average correctly even when
batches hold different numbers of real tokens. All math is in float32 whatever the
logits dtype. Functions take logits `[..., V]` with targets and weights of shape
`[...]`: `[B, L, V]` / `[B, L]` for sequences, `[B, C]` / `[B]` for classification.
"""

import jax
import jax.numpy as jnp


def weights_from_targets(targets: jax.Array, pad_id: int | None) -> jax.Array:
    """Token weights `[...]`, float32: 1.0 where `targets != pad_id`, else 0.0; all 1.0 with
    `pad_id=None` (a tokenizer without PAD: no id is padding). `pad_id` is the tokenizer's
    (`model.tokens.pad`); the trainer's weights come from families.Family.targets.
    """
    if pad_id is None:
        return jnp.ones(jnp.shape(targets), jnp.float32)
    return (targets != pad_id).astype(jnp.float32)


def _check_shapes(logits: jax.Array, targets: jax.Array, weights: jax.Array) -> None:
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"targets.shape={targets.shape} must equal logits.shape[:-1]="
            f"{logits.shape[:-1]} (logits.shape={logits.shape})"
        )
    if weights.shape != targets.shape:
        raise ValueError(f"weights.shape={weights.shape} must equal targets.shape={targets.shape}")


def cross_entropy(
    logits: jax.Array,
    targets: jax.Array,
    weights: jax.Array,
    label_smoothing: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
    """Weighted, label-smoothed cross-entropy: `(loss_sum, weight_sum)`, float32 scalars.

    Shapes: logits `[..., V]`, targets int `[...]`, weights `[...]` (token weights
    `weights_from_targets(targets, pad_id)` for sequences, `example_weights` `[B]` for
    classification with logits `[B, C]`).

    Label smoothing (Vaswani et al. 2017 §5.4, eps_ls = 0.1; implemented as in
    tensor2tensor and the flax wmt example): the target distribution puts
    `1 - eps` on the target and `eps / (V - 1)` on each other class. The entropy of
    that distribution is subtracted, so a prediction equal to it scores 0 and the
    loss stays a KL divergence (>= 0) comparable across `label_smoothing` values.
    With `label_smoothing=0` this is exactly `-log softmax(logits)[target]`.
    `label_smoothing` is a Python float (mark it static when jitting).
    """
    _check_shapes(logits, targets, weights)
    vocab = logits.shape[-1]
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing!r} is invalid; expected [0, 1)")
    if label_smoothing > 0 and vocab < 2:
        raise ValueError(f"label_smoothing={label_smoothing} needs >= 2 classes, got V={vocab}")
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [..., V]
    log_p_target = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]  # [...]
    if label_smoothing == 0:
        loss = -log_p_target
    else:
        confidence = 1.0 - label_smoothing
        low = label_smoothing / (vocab - 1)
        # Sum over the non-target classes without materialising a [..., V] one-hot.
        log_p_others = jnp.sum(log_probs, axis=-1) - log_p_target
        entropy = -(confidence * jnp.log(confidence) + label_smoothing * jnp.log(low))
        loss = -(confidence * log_p_target + low * log_p_others) - entropy
    weights = weights.astype(jnp.float32)
    return jnp.sum(loss * weights), jnp.sum(weights)


def token_accuracy(
    logits: jax.Array, targets: jax.Array, weights: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Weighted argmax accuracy: `(correct_sum, weight_sum)`, float32 scalars.

    Shapes as `cross_entropy`; with logits `[B, C]`, labels `[B]` and example weights
    `[B]` this is classification accuracy.
    """
    _check_shapes(logits, targets, weights)
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
    weights = weights.astype(jnp.float32)
    return jnp.sum(correct * weights), jnp.sum(weights)


def sequence_accuracy(
    logits: jax.Array,
    targets: jax.Array,
    example_weights: jax.Array,
    weights: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Teacher-forced exact match: `(correct_examples, num_examples)`, float32 scalars.

    An example `[L]` counts as correct when the argmax matches the target at every
    position with non-zero token weight (e.g. `weights_from_targets(targets, pad_id)`: all
    positions that are not the tokenizer's PAD, EOS included). Only real examples count: both
    sums are weighted by `example_weights` `[B]` (0 for padding examples of a ragged last
    eval batch). Shapes: logits `[B, L, V]`, targets `[B, L]`, weights `[B, L]`.
    """
    _check_shapes(logits, targets, weights)
    if logits.ndim != 3 or example_weights.shape != targets.shape[:1]:
        raise ValueError(
            f"sequence_accuracy needs logits [B, L, V] and example_weights [B]; got "
            f"logits.shape={logits.shape}, example_weights.shape={example_weights.shape}"
        )
    wrong = (jnp.argmax(logits, axis=-1) != targets) & (weights > 0)  # [B, L]
    correct = jnp.logical_not(jnp.any(wrong, axis=-1)).astype(jnp.float32)  # [B]
    example_weights = example_weights.astype(jnp.float32)
    return jnp.sum(correct * example_weights), jnp.sum(example_weights)
