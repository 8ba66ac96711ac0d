"""Losses and accuracies against dense numpy reference math."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.train import losses

PAD = 0  # the datasets' PAD (the tokenizers' pad_id)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _batch(seed=0, b=3, length=5, vocab=7):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(b, length, vocab)).astype(np.float32) * 3
    targets = rng.integers(3, vocab, size=(b, length)).astype(np.int32)
    targets[0, 3:] = 0  # padding at the end of example 0
    targets[2, 1:] = 0
    return logits, targets


def test_weights_from_targets():
    weights = losses.weights_from_targets(jnp.array([[5, 2, 0, 0], [1, 0, 3, 0]]), PAD)
    assert weights.dtype == jnp.float32
    np.testing.assert_array_equal(weights, [[1, 1, 0, 0], [1, 0, 1, 0]])


def test_no_smoothing_is_negative_log_softmax_at_target():
    logits, targets = _batch()
    weights = np.asarray(losses.weights_from_targets(targets, PAD))
    loss_sum, weight_sum = losses.cross_entropy(logits, targets, weights, 0.0)
    nll = -np.take_along_axis(_log_softmax(logits), targets[..., None], -1)[..., 0]
    np.testing.assert_allclose(loss_sum, (nll * weights).sum(), rtol=1e-5)
    assert float(weight_sum) == weights.sum() == 9


def test_masked_positions_contribute_nothing():
    logits, targets = _batch()
    weights = losses.weights_from_targets(targets, PAD)
    perturbed = np.where((np.asarray(weights) == 0)[..., None], 1e4, logits)
    for smoothing in (0.0, 0.1):
        a = losses.cross_entropy(logits, targets, weights, smoothing)
        b = losses.cross_entropy(perturbed, targets, weights, smoothing)
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("smoothing", [0.1, 0.3])
def test_label_smoothing_is_kl_to_smoothed_targets(smoothing):
    logits, targets = _batch(seed=1)
    vocab = logits.shape[-1]
    weights = np.asarray(losses.weights_from_targets(targets, PAD))
    q = np.full(logits.shape, smoothing / (vocab - 1))
    np.put_along_axis(q, targets[..., None], 1 - smoothing, -1)
    kl = (q * (np.log(q) - _log_softmax(logits))).sum(-1)
    loss_sum, _ = losses.cross_entropy(logits, targets, weights, smoothing)
    np.testing.assert_allclose(loss_sum, (kl * weights).sum(), rtol=1e-5)
    # Predicting exactly the smoothed distribution scores 0.
    perfect, _ = losses.cross_entropy(np.log(q).astype(np.float32), targets, weights, smoothing)
    assert abs(float(perfect)) < 1e-5


def test_float32_for_bfloat16_logits_and_jittable():
    logits, targets = _batch()
    weights = losses.weights_from_targets(targets, PAD)
    f = jax.jit(losses.cross_entropy, static_argnums=3)
    loss16, count = f(jnp.asarray(logits, jnp.bfloat16), targets, weights, 0.1)
    loss32, _ = losses.cross_entropy(
        jnp.asarray(logits, jnp.bfloat16).astype(jnp.float32), targets, weights, 0.1
    )
    assert loss16.dtype == count.dtype == jnp.float32
    np.testing.assert_allclose(loss16, loss32, rtol=1e-6)


def test_classification_cross_entropy_and_accuracy_with_example_weights():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(4, 3)).astype(np.float32)
    labels = np.array([0, 1, 2, 1], np.int32)
    example_weights = np.array([1, 1, 1, 0], np.float32)  # last example is batch padding
    loss_sum, count = losses.cross_entropy(logits, labels, example_weights, 0.0)
    nll = -_log_softmax(logits)[np.arange(4), labels]
    np.testing.assert_allclose(loss_sum, nll[:3].sum(), rtol=1e-5)
    correct, total = losses.token_accuracy(logits, labels, example_weights)
    assert float(total) == 3
    assert float(correct) == (logits.argmax(-1) == labels)[:3].sum()


def test_token_accuracy_counts_only_weighted_positions():
    logits, targets = _batch(seed=3)
    weights = np.asarray(losses.weights_from_targets(targets, PAD))
    correct, total = losses.token_accuracy(logits, targets, weights)
    assert float(correct) == ((logits.argmax(-1) == targets) * weights).sum()
    assert float(total) == weights.sum()


def _one_hot_logits(predictions, vocab=6):
    return jax.nn.one_hot(jnp.asarray(predictions), vocab) * 10.0


def test_sequence_accuracy_exact_match_over_non_pad_positions():
    targets = np.array(
        [
            [3, 4, 2, 0],  # right everywhere that counts; wrong at a pad position
            [3, 4, 2, 0],  # wrong at EOS -> not an exact match
            [5, 5, 5, 2],  # right
            [3, 2, 0, 0],  # right, but a padding example (weight 0)
        ],
        np.int32,
    )
    predictions = targets.copy()
    predictions[0, 3] = 5
    predictions[1, 2] = 4
    example_weights = np.array([1, 1, 1, 0], np.float32)
    weights = losses.weights_from_targets(targets, PAD)
    correct, count = losses.sequence_accuracy(
        _one_hot_logits(predictions), targets, example_weights, weights
    )
    assert (float(correct), float(count)) == (2.0, 3.0)
    # A padding example that is wrong changes nothing either.
    predictions[3, 0] = 4
    again = losses.sequence_accuracy(
        _one_hot_logits(predictions), targets, example_weights, weights
    )
    assert (float(again[0]), float(again[1])) == (2.0, 3.0)


@pytest.mark.parametrize("smoothing", [-0.1, 1.0])
def test_bad_label_smoothing_raises(smoothing):
    logits, targets = _batch()
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.cross_entropy(logits, targets, losses.weights_from_targets(targets, PAD), smoothing)


def test_shape_mismatch_raises():
    logits, targets = _batch()
    with pytest.raises(ValueError, match="targets.shape"):
        losses.cross_entropy(logits, targets[:, :-1], np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="weights.shape"):
        losses.token_accuracy(logits, targets, np.ones((3,), np.float32))
    with pytest.raises(ValueError, match="example_weights"):
        weights = losses.weights_from_targets(targets, PAD)
        losses.sequence_accuracy(logits, targets, np.ones((3, 5), np.float32), weights)
