"""The random position schemes against NumPy reimplementations of the code they follow.

batch_randomized: Ruoss et al. 2023 (google-deepmind/randomized_positional_encodings,
models/positional_encodings.py, noisy_fixed_positional_encodings): one
`choice(noise_max_length, (T,), replace=False)` per batch, sorted.
step_offset: tensor2tensor (models/research/universal_transformer_util.py,
add_position_timing_signal with position_start_index="random"): one
`random_uniform([], maxval=length)` per batch at every recurrent step.

Both are compared by distribution: a JAX key stream and NumPy's generator differ, so the draws
themselves cannot match, but their frequencies must, bin by bin (chi-square over fixed draws,
so the test is deterministic).
"""

import itertools
import math

import jax
import numpy as np
import pytest

from transformer_jax.layers.positional import step_offsets, training_positions

DRAWS = 6000
# chi-square critical values at p = 1e-4: a correct sampler fails with that chance per test,
# and the draws are fixed, so a pass is a pass for good.
CHI2_CRITICAL = {9: 33.7, 19: 48.3, 24: 54.1}


def reference_batch_subset(rng: np.random.Generator, max_len: int, length: int) -> np.ndarray:
    """Ruoss et al.'s sampling in NumPy: a subset without replacement, sorted."""
    return np.sort(rng.choice(np.arange(max_len), size=(length,), replace=False))


def reference_step_offsets(rng: np.random.Generator, num_steps: int, length: int) -> np.ndarray:
    """tensor2tensor's: a uniform integer in [0, length) drawn anew at every step."""
    return np.array([rng.integers(0, length) for _ in range(num_steps)])


def chi_square(counts: np.ndarray, expected: np.ndarray) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


def our_batch_subsets(max_len: int, length: int, batch: int = 3) -> np.ndarray:
    """(DRAWS, batch, length) positions of batch_randomized, one draw per key."""
    valid_BT = np.ones((batch, length), bool)
    draw = jax.jit(
        jax.vmap(lambda key: training_positions("batch_randomized", key, valid_BT, max_len))
    )
    return np.asarray(draw(jax.random.split(jax.random.PRNGKey(0), DRAWS)))


def test_batch_subset_is_one_sorted_subset_without_replacement_per_batch():
    positions_NBT = our_batch_subsets(max_len=12, length=5)
    assert (positions_NBT == positions_NBT[:, :1]).all()  # the same subset for every row
    assert (np.diff(positions_NBT, axis=-1) > 0).all()  # sorted, hence without replacement
    assert positions_NBT.min() >= 0 and positions_NBT.max() < 12
    # Fresh draws per key: many distinct subsets.
    assert len({tuple(row) for row in positions_NBT[:, 0]}) > 500


def test_batch_subsets_are_distributed_as_the_reference():
    """Every one of the C(6, 3) = 20 subsets is equally likely under the reference's sampling;
    ours and NumPy's reimplementation both match that, subset by subset."""
    max_len, length = 6, 3
    subsets = list(itertools.combinations(range(max_len), length))
    expected = np.full(len(subsets), DRAWS / len(subsets))
    index = {subset: i for i, subset in enumerate(subsets)}
    ours = np.bincount(
        [index[tuple(row)] for row in our_batch_subsets(max_len, length)[:, 0]],
        minlength=len(subsets),
    )
    rng = np.random.default_rng(0)
    reference = np.bincount(
        [index[tuple(reference_batch_subset(rng, max_len, length))] for _ in range(DRAWS)],
        minlength=len(subsets),
    )
    assert chi_square(ours, expected) < CHI2_CRITICAL[19]
    assert chi_square(reference, expected) < CHI2_CRITICAL[19]
    # The two samplers agree with each other too (two-sample chi-square, 19 degrees).
    assert chi_square(ours, (ours + reference) / 2) * 2 < CHI2_CRITICAL[19]


def test_batch_subset_order_statistics_match_the_reference():
    """The k-th smallest of T positions drawn from M without replacement has mean
    (k + 1)(M + 1)/(T + 1) - 1; ours and the reference's empirical means agree with it."""
    max_len, length = 40, 6
    ours = our_batch_subsets(max_len, length)[:, 0].mean(axis=0)
    rng = np.random.default_rng(1)
    reference = np.mean([reference_batch_subset(rng, max_len, length) for _ in range(DRAWS)], 0)
    exact = (np.arange(length) + 1) * (max_len + 1) / (length + 1) - 1
    np.testing.assert_allclose(ours, exact, atol=0.4)
    np.testing.assert_allclose(reference, exact, atol=0.4)


def test_batch_subset_rows_share_the_draw_and_short_rows_read_its_start():
    valid_BT = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)
    positions_BT = np.asarray(
        training_positions("batch_randomized", jax.random.PRNGKey(3), valid_BT, max_len=50)
    )
    np.testing.assert_array_equal(positions_BT[0], positions_BT[1])


def our_step_offsets(num_steps: int, length: int, max_len: int) -> np.ndarray:
    draw = jax.jit(jax.vmap(lambda key: step_offsets(key, num_steps, length, max_len)))
    return np.asarray(draw(jax.random.split(jax.random.PRNGKey(0), DRAWS)))


def test_step_offsets_are_uniform_below_the_batch_length_at_every_step():
    """Each step's offset is uniform in [0, T), as the reference's, step by step."""
    num_steps, length = 4, 10
    ours_NU = our_step_offsets(num_steps, length, max_len=64)
    rng = np.random.default_rng(0)
    reference_NU = np.stack([reference_step_offsets(rng, num_steps, length) for _ in range(DRAWS)])
    expected = np.full(length, DRAWS / length)
    for u in range(num_steps):
        ours = np.bincount(ours_NU[:, u], minlength=length)
        reference = np.bincount(reference_NU[:, u], minlength=length)
        assert len(ours) == length  # nothing at T or above
        assert chi_square(ours, expected) < CHI2_CRITICAL[9]
        assert chi_square(reference, expected) < CHI2_CRITICAL[9]


def test_step_offsets_are_redrawn_independently_at_every_step():
    """Consecutive steps' offsets are independent: the pair (o_u, o_u+1) is uniform over the
    T^2 pairs, as for the reference's independent draws (not one offset for all steps)."""
    num_steps, length = 3, 5
    ours_NU = our_step_offsets(num_steps, length, max_len=64)
    assert (ours_NU[:, 0] != ours_NU[:, 1]).mean() > 0.7  # one shared offset would give 0
    expected = np.full(length**2, DRAWS / length**2)
    for u in range(num_steps - 1):
        pairs = np.bincount(ours_NU[:, u] * length + ours_NU[:, u + 1], minlength=length**2)
        assert chi_square(pairs, expected) < CHI2_CRITICAL[24]


def test_step_zero_offset_is_the_stacks_batch_offset_and_rows_share_it():
    """The stack's masks are built from step 0's positions: they are step_offsets' first."""
    key = jax.random.PRNGKey(7)
    valid_BT = np.ones((3, 9), bool)
    positions_BT = np.asarray(training_positions("step_offset", key, valid_BT, max_len=64))
    offsets_U = np.asarray(step_offsets(key, 4, 9, max_len=64))
    np.testing.assert_array_equal(positions_BT, offsets_U[0] + np.arange(9)[None].repeat(3, 0))


@pytest.mark.parametrize(("length", "max_len", "bound"), [(10, 19, 10), (10, 14, 5), (10, 10, 1)])
def test_step_offsets_stay_inside_a_short_table(length, max_len, bound):
    """[0, T) needs a table of 2 T - 1 rows; a shorter one cuts the offsets to [0, L - T]."""
    offsets = our_step_offsets(2, length, max_len)
    assert offsets.min() == 0 and offsets.max() == bound - 1
    assert math.isclose(offsets.mean(), (bound - 1) / 2, abs_tol=0.3)
