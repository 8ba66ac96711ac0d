"""Masks: which keys each query may see."""

import jax.numpy as jnp
import numpy as np

from transformer_jax.layers import masks


def positions(length):
    return jnp.arange(length)[None]


def test_causal_is_lower_triangular():
    mask = masks.causal_mask(positions(5), positions(5))[0, 0]
    np.testing.assert_array_equal(mask, np.tril(np.ones((5, 5), bool)))


def test_bidirectional_window_sees_half_window_each_side():
    mask = masks.sliding_window_mask(positions(8), positions(8), window=4, causal=False)[0, 0]
    for i in range(8):
        for j in range(8):
            assert mask[i, j] == (abs(i - j) <= 2)


def test_causal_window_sees_last_w_keys():
    mask = masks.sliding_window_mask(positions(8), positions(8), window=3, causal=True)[0, 0]
    for i in range(8):
        for j in range(8):
            assert mask[i, j] == (0 <= i - j < 3)


def test_global_tokens_see_and_are_seen_everywhere():
    mask = masks.sliding_window_mask(
        positions(8), positions(8), window=2, causal=False, num_global=2
    )[0, 0]
    assert mask[:2].all() and mask[:, :2].all()
    assert not mask[7, 3]


def test_segment_mask_and_combine():
    seg = jnp.array([[1, 1, 2, 2, 0]])
    mask = masks.combine(masks.segment_mask(seg, seg), None, masks.padding_mask(seg != 0))[0, 0]
    expected = np.array(
        [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 0]], bool
    )
    np.testing.assert_array_equal(mask, expected)
    assert masks.combine(None, None) is None
