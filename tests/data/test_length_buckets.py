"""data.bucket_by_length: tensor2tensor's length buckets and one length per batch, and the
random position offsets they bound (at most the batch's own length, as tensor2tensor's)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from data_fixtures import small_config, unpadded

from transformer_jax.data import load_dataset, pipeline
from transformer_jax.layers.positional import step_offsets, training_positions

MAX_POSITIONS = 801  # the tensor2tensor recipe's table
BOUNDARIES = pipeline.t2t_bucket_boundaries(256)


def _t2t_length(inputs_row, targets_row) -> int:
    """tensor2tensor's example length: the longer side with an EOS on each (targets have it)."""
    return max(len(unpadded(inputs_row)) + 1, len(unpadded(targets_row)))


def _bucket_bounds(length: int) -> tuple[int, int]:
    """[low, high) of the tensor2tensor bucket holding `length` (tf's bucket_by_sequence_length)."""
    edges = [0, *BOUNDARIES, 10**9]
    i = int(np.searchsorted(BOUNDARIES, length, side="right"))
    return edges[i], edges[i + 1]


def _t2t_copy(data_dir, bucket_by_length: str):
    return load_dataset(
        small_config(
            "copy",
            data_dir,
            variant="t2t",
            max_len=40,
            long_max_len=120,
            num_train=3000,
            num_test_long=300,
            bucket_by_length=bucket_by_length,
        )
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("t2t_buckets")


@pytest.fixture(scope="module")
def t2t_copy(data_dir):
    return _t2t_copy(data_dir, "t2t")


def test_t2t_boundaries_are_tensor2tensors():
    # _bucket_boundaries(256, 8, 1.1) (utils/data_reader.py:71-79), written out by hand.
    assert BOUNDARIES[:16] == [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 26]
    assert BOUNDARIES[-4:] == [179, 196, 215, 236]
    lengths = np.array([1, 7, 8, 9, 20, 21, 22, 236, 401])
    np.testing.assert_array_equal(
        pipeline.length_buckets(lengths, BOUNDARIES), [0, 0, 1, 2, 3, 3, 4, 5, 5]
    )
    np.testing.assert_array_equal(
        pipeline.length_buckets(np.array([5, 2, 5, 9]), None), [1, 0, 1, 2]
    )


def _check_batch(batch, positions_key, checked_shapes: set):
    """Every real example in the batch's bucket, the batch padded to the power of two above its
    longest, and its offsets (training_positions' step-0 draw and every recurrent step's) below
    its longest real row, the length tensor2tensor pads its batch to; drawn once per shape and
    longest row (each new shape traces the position ops again)."""
    real = batch["example_weights"] > 0
    inputs, targets = batch["inputs"][real], batch["targets"][real]
    lengths = [_t2t_length(x, y) for x, y in zip(inputs, targets, strict=True)]
    bounds = {_bucket_bounds(n) for n in lengths}
    assert len(bounds) == 1, f"lengths {sorted(set(lengths))} span buckets {bounds}"
    low, high = bounds.pop()
    assert low <= min(lengths) and max(lengths) < high
    longest_input = max(len(unpadded(x)) for x in inputs)
    assert batch["inputs"].shape[1] in (pipeline.padded_size(longest_input, 10**9), 40, 120)
    assert batch["inputs"].shape[1] >= longest_input
    key = (batch["inputs"].shape, longest_input)
    if key in checked_shapes:
        return
    checked_shapes.add(key)
    for name in ("inputs", "targets"):
        valid_BT = jnp.asarray(batch[name] > 0)
        if name == "targets":  # the decoder reads BOS and the targets but their EOS
            valid_BT = (
                jnp.asarray(np.arange(valid_BT.shape[1]) < max(lengths))[None]
                & (jnp.asarray(batch["example_weights"] > 0)[:, None])
            )
        longest = int(valid_BT.sum(axis=1).max())
        length = valid_BT.shape[1]
        pos_BT = training_positions("step_offset", positions_key, valid_BT, MAX_POSITIONS)
        offsets = np.concatenate(
            [
                np.asarray(pos_BT[:, 0]),
                np.asarray(step_offsets(positions_key, 8, length, MAX_POSITIONS, longest)),
            ]
        )
        # tensor2tensor's limit: one offset in [0, batch length), its batch padded to its
        # longest example; so for an example of n tokens, offset + n <= 2 x longest - 1, and
        # the longest is in the example's own bucket.
        assert (offsets >= 0).all() and (offsets < longest).all()
        assert longest < high


def test_training_batches_hold_one_bucket_and_offsets_below_their_length(t2t_copy):
    batches = list(itertools.islice(t2t_copy.train_iterator(seed=0, batch_size=16), 60))
    checked_shapes = set()
    for k, batch in enumerate(batches):
        _check_batch(batch, jax.random.PRNGKey(k), checked_shapes)
    widths = {b["inputs"].shape[1] for b in batches}
    assert min(widths) < 10 and max(widths) > 30  # short and long buckets both train


@pytest.mark.parametrize("split", ["test", "test_long"])
def test_eval_batches_hold_one_bucket_and_every_example_once(t2t_copy, data_dir, split):
    batches = t2t_copy.eval_batches(split, batch_size=16)
    checked_shapes = set()
    for k, batch in enumerate(batches):
        _check_batch(batch, jax.random.PRNGKey(k), checked_shapes)
    plain = _t2t_copy(data_dir, "none").eval_batches(split, batch_size=16)

    def examples(bs):
        return sorted(
            tuple(unpadded(x))
            for b in bs
            for x, w in zip(b["inputs"], b["example_weights"], strict=True)
            if w
        )

    assert examples(batches) == examples(plain)
    # A short example's batch is short: a length-3 test_long example never meets offset 300.
    short = [b for b in batches if (b["example_weights"] > 0).any() and b["inputs"].shape[1] <= 8]
    assert short
    # The offsets follow the real rows: a batch padded past them draws below its longest.
    valid_BT = jnp.asarray(np.arange(16)[None, :] < np.array([[3], [2]]))
    draws = [
        training_positions("batch_offset", jax.random.PRNGKey(k), valid_BT, MAX_POSITIONS)[0, 0]
        for k in range(40)
    ]
    assert set(np.asarray(draws).tolist()) == {0, 1, 2}


def test_one_length_per_batch_spreads_each_rows_random_positions_over_the_range(tmp_path):
    """Ruoss et al.'s batches (data.bucket_by_length="each"): one length per batch, so the
    batch's one sorted subset of [0, L) (batch_randomized) is every row's own, spread over the
    range: the last of n sorted uniform draws from L slots has mean L - 1 - (L - n) / (n + 1)."""
    config = small_config("reverse", tmp_path, layout="prompt", bucket_by_length="each")
    dataset = load_dataset(config)
    assert dataset.info.train_lengths_vary  # a seed group refuses it (train/seed_group.py)
    unbucketed = small_config("reverse", tmp_path, layout="prompt")
    assert not load_dataset(unbucketed).info.train_lengths_vary
    batches = list(itertools.islice(dataset.train_iterator(seed=0, batch_size=8), 40))
    table = 64
    by_width = {}
    for batch in batches:
        lengths = set((batch["targets"] > 0).sum(axis=1).tolist())
        assert len(lengths) == 1  # one length per batch
        (n,) = lengths
        cap = dataset.info.padded_lengths("train")[1]
        assert batch["targets"].shape[1] == pipeline.padded_size(n, cap)
        by_width.setdefault(n, batch)
    assert len(by_width) > 3
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    for n, batch in by_width.items():
        valid_BT = jnp.asarray(batch["targets"] > 0)
        draw = jax.vmap(lambda k, v=valid_BT: training_positions("batch_randomized", k, v, table))
        pos_KBn = np.asarray(jax.jit(draw)(keys))[:, :, :n]  # each row's real positions
        assert np.all(np.diff(pos_KBn, axis=-1) > 0) and pos_KBn.max() < table
        expected_last = table - 1 - (table - n) / (n + 1)
        np.testing.assert_allclose(pos_KBn[:, :, -1].mean(), expected_last, rtol=0.03)
