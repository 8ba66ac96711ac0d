"""grain pipelines: fixed shapes, ragged eval batches, seeded shuffling, checkpointable state."""

import json

import grain
import numpy as np
import pytest
from data_fixtures import small_config

from transformer_jax.data import load_dataset, pipeline
from transformer_jax.data.batching import rows_to_batches


def _take(iterator, n):
    return [next(iterator) for _ in range(n)]


def _assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])


@pytest.fixture(scope="module")
def reverse(tmp_path_factory):
    return load_dataset(small_config("reverse", tmp_path_factory.mktemp("reverse")))


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    path = root / "story.txt"
    paragraphs = [f"Paragraph {i}: " + "the quick brown fox " * (i % 7 + 1) for i in range(60)]
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return {
        packing: load_dataset(
            small_config("text_file", root, path=str(path), seq_len=24, packing=packing)
        )
        for packing in (False, True)
    }


def test_train_batches_have_fixed_shapes(reverse):
    info = reverse.info
    for batch in _take(reverse.train_iterator(seed=0, batch_size=7), 50):
        assert (batch["inputs"].shape[1], batch["targets"].shape[1]) == info.padded_lengths("train")
        assert batch["inputs"].shape[0] == batch["targets"].shape[0] == 7
        assert batch["inputs"].dtype == batch["targets"].dtype == np.int32
        np.testing.assert_array_equal(batch["example_weights"], np.ones(7, np.float32))


def test_ragged_last_eval_batch_is_filled_with_weight_zero_rows(reverse):
    batches = reverse.eval_batches("test", batch_size=16)  # 50 = 3 * 16 + 2
    assert len(batches) == 4
    assert {b["inputs"].shape for b in batches} == {(16, 8)}  # test: padded to max_len only
    last = batches[-1]
    np.testing.assert_array_equal(last["example_weights"], [1.0] * 2 + [0.0] * 14)
    assert not last["inputs"][2:].any() and not last["targets"][2:].any()
    assert all(last["targets"][:2].any(axis=1))
    capped = reverse.eval_batches("test", batch_size=16, max_examples=20)
    assert [b["example_weights"].sum() for b in capped] == [16.0, 4.0]
    _assert_same_batches(capped[:1], batches[:1])


def test_rows_to_batches_keeps_every_row_once():
    rows = [{"targets": np.full(3, i, np.int32)} for i in range(1, 6)]
    batches = rows_to_batches(rows, batch_size=2)
    got = np.concatenate([b["targets"][b["example_weights"] > 0] for b in batches])
    np.testing.assert_array_equal(got[:, 0], [1, 2, 3, 4, 5])
    assert batches[-1]["targets"].shape == (2, 3)


def test_shuffling_is_deterministic_by_seed(reverse):
    a = _take(reverse.train_iterator(seed=3, batch_size=8), 5)
    b = _take(reverse.train_iterator(seed=3, batch_size=8), 5)
    c = _take(reverse.train_iterator(seed=4, batch_size=8), 5)
    _assert_same_batches(a, b)
    assert not np.array_equal(a[0]["inputs"], c[0]["inputs"])


def test_training_repeats_with_a_new_order_each_epoch(reverse):
    # 300 examples, batch 100: batches 0-2 are epoch 1, 3-5 epoch 2; both cover every example.
    batches = _take(reverse.train_iterator(seed=0, batch_size=100), 6)
    epochs = [np.concatenate([b["inputs"] for b in batches[i : i + 3]]) for i in (0, 3)]
    assert not np.array_equal(epochs[0], epochs[1])
    for epoch in epochs:
        train = reverse.eval_batches("train", batch_size=300)[0]["inputs"]
        np.testing.assert_array_equal(np.unique(epoch, axis=0), np.unique(train, axis=0))


@pytest.mark.parametrize("seed", [7, 2**32 - 2])
def test_index_batches_are_grains_shuffle_repeat_batch(seed):
    """The same order as the grain chain it replaces (checkpoints store positions in it), over
    batches that run from one epoch into the next and epoch seeds that wrap past 2^32."""
    reference = grain.MapDataset.range(10).shuffle(seed=seed).repeat().batch(4)
    batches = pipeline.shuffled_index_batches(
        10, seed=seed, batch_size=4, make_batch=lambda indices: {"indices": indices}
    )
    got = _take(iter(batches), 12)  # 4.8 epochs
    for k, batch in enumerate(got):
        np.testing.assert_array_equal(batch["indices"], reference[k])
        assert batch["indices"].dtype == reference[k].dtype


@pytest.mark.parametrize("dataset", ["reverse", "text", "text_packed"])
def test_restored_iterator_continues_with_the_same_batches(reverse, texts, dataset):
    dataset = {"reverse": reverse, "text": texts[False], "text_packed": texts[True]}[dataset]
    iterator = dataset.train_iterator(seed=1, batch_size=8)
    _take(iterator, 5)
    state = iterator.get_state()
    state = json.loads(json.dumps(state))  # what a checkpoint stores must survive JSON
    expected = _take(iterator, 7)
    fresh = dataset.train_iterator(seed=1, batch_size=8)
    fresh.set_state(state)
    _assert_same_batches(_take(fresh, 7), expected)
