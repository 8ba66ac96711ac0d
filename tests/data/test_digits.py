"""Image classification data: the digits builder, augmentation, resizing and catalog images."""

import numpy as np
import pytest
import tensorflow_datasets as tfds
from data_fixtures import small_config
from sklearn.datasets import load_digits

from transformer_jax.data import augment, load_dataset
from transformer_jax.data.sources import open_split


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """One digits build (about a second) shared by the tests of this module."""
    return tmp_path_factory.mktemp("tfds")


def split_ids(config, split):
    name = f"sklearn_digits/test{config.num_test}-seed{config.data_seed}"
    source = open_split(name, split, config.data_dir)
    return np.asarray([source[i]["id"] for i in range(len(source))])


def test_split_sizes_are_fixed_disjoint_and_seeded(data_dir):
    config = small_config("digits", data_dir)
    info = load_dataset(config).info
    assert (info.kind, info.num_classes, info.image_shape) == ("classification", 10, (8, 8, 1))
    train, test = split_ids(config, "train"), split_ids(config, "test")
    assert (len(train), len(test)) == (1497, 300)
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(1797))
    load_dataset(small_config("digits", data_dir, data_seed=1))
    other = split_ids(small_config("digits", data_dir, data_seed=1), "test")
    assert len(other) == 300 and set(other.tolist()) != set(test.tolist())
    # Rebuilding from scratch gives the same split: it depends on data_seed alone.
    fresh = small_config("digits", data_dir / "fresh")
    load_dataset(fresh)
    assert set(split_ids(fresh, "test").tolist()) == set(test.tolist())


def test_eval_batches_are_the_images_scaled_to_unit_range_with_their_labels(data_dir):
    config = small_config("digits", data_dir)
    batches = load_dataset(config).eval_batches("test", batch_size=128)
    weights = [float(b["example_weights"].sum()) for b in batches]
    assert weights == [128, 128, 44]
    inputs = np.concatenate([b["inputs"] for b in batches])[:300]
    labels = np.concatenate([b["label"] for b in batches])[:300]
    assert inputs.dtype == np.float32 and labels.dtype == np.int32
    assert inputs.shape == (300, 8, 8, 1) and inputs.min() == 0.0 and inputs.max() == 1.0
    digits = load_digits()
    ids = split_ids(config, "test")
    np.testing.assert_array_equal(inputs[..., 0], digits.images[ids] / 16.0)
    np.testing.assert_array_equal(labels, digits.target[ids])
    assert not batches[-1]["inputs"][44:].any() and not batches[-1]["label"][44:].any()


def test_training_batches_are_deterministic_by_seed_and_resume_exactly(data_dir):
    config = small_config("digits", data_dir)
    dataset = load_dataset(config)
    first = dataset.train_iterator(seed=3, batch_size=16)
    batches = [next(first) for _ in range(5)]
    again = dataset.train_iterator(seed=3, batch_size=16)
    for expected in batches:
        got = next(again)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    other = next(dataset.train_iterator(seed=4, batch_size=16))
    assert not np.array_equal(other["inputs"], batches[0]["inputs"])
    resumed = dataset.train_iterator(seed=3, batch_size=16)
    for _ in range(2):
        next(resumed)
    state = resumed.get_state()
    restored = dataset.train_iterator(seed=3, batch_size=16)
    restored.set_state(state)
    np.testing.assert_array_equal(next(restored)["inputs"], batches[2]["inputs"])
    assert batches[0]["example_weights"].tolist() == [1.0] * 16


def test_augmentation_shifts_training_images_only(data_dir):
    plain = load_dataset(small_config("digits", data_dir, random_shift=0))
    shifted = load_dataset(small_config("digits", data_dir, random_shift=1))
    plain_it = plain.train_iterator(seed=0, batch_size=32)
    shifted_it = shifted.train_iterator(seed=0, batch_size=32)
    changed = 0
    for _ in range(3):
        a, b = next(plain_it), next(shifted_it)
        np.testing.assert_array_equal(a["label"], b["label"])  # same examples, same order
        for original, augmented in zip(a["inputs"], b["inputs"], strict=True):
            shifts = [
                augment.random_shift(original[None], 1, np.random.default_rng(s))[0]
                for s in range(200)
            ]
            assert any(np.array_equal(augmented, s) for s in shifts)
            changed += not np.array_equal(augmented, original)
    assert changed > 48  # 8 of the 9 offsets move the image
    for a, b in zip(
        plain.eval_batches("test", batch_size=100),
        shifted.eval_batches("test", batch_size=100),
        strict=True,
    ):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])


def test_random_shift_translates_with_zero_fill_by_at_most_max_shift():
    image = np.arange(1, 26, dtype=np.uint8).reshape(1, 5, 5, 1)
    seen = set()
    for seed in range(100):
        out = augment.random_shift(image, 1, np.random.default_rng(seed))[0, ..., 0]
        found = [
            (dy, dx)
            for dy in (-1, 0, 1)
            for dx in (-1, 0, 1)
            if np.array_equal(out, _translate(image[0, ..., 0], dy, dx))
        ]
        assert len(found) == 1
        seen.add(found[0])
    assert len(seen) == 9
    np.testing.assert_array_equal(augment.random_shift(image, 0, np.random.default_rng(0)), image)


def _translate(image, dy, dx):
    out = np.zeros_like(image)
    h, w = image.shape
    out[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = image[
        max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)
    ]
    return out


def test_random_flip_mirrors_about_half_the_images():
    images = np.random.default_rng(0).integers(0, 255, (200, 4, 4, 3), dtype=np.uint8)
    out = augment.random_flip(images, np.random.default_rng(0))
    mirrored = [np.array_equal(o, i[:, ::-1]) for o, i in zip(out, images, strict=True)]
    kept = [np.array_equal(o, i) for o, i in zip(out, images, strict=True)]
    assert all(m or k for m, k in zip(mirrored, kept, strict=True))
    assert 70 < sum(mirrored) < 130


def test_resize_changes_the_size_and_keeps_flat_images_flat(data_dir):
    flat = np.full((2, 8, 8, 3), 7, dtype=np.uint8)
    np.testing.assert_array_equal(augment.resize(flat, 20), np.full((2, 20, 20, 3), 7))
    config = small_config("digits", data_dir, image_size=16)
    dataset = load_dataset(config)
    assert dataset.info.image_shape == (16, 16, 1)
    batch = next(dataset.train_iterator(seed=0, batch_size=4))
    assert batch["inputs"].shape == (4, 16, 16, 1) and batch["inputs"].max() <= 1.0


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"num_test": 0}, r"data.num_test=0 is invalid; valid: 1 .. 1796"),
        ({"num_test": 1797}, "data.num_test=1797"),
        ({"random_shift": -1}, "data.random_shift=-1"),
        ({"image_size": -2}, "data.image_size=-2"),
        ({"vocab_size": 3}, "data.vocab_size=3 is not a field"),
    ],
)
def test_bad_data_configs_name_the_field(data_dir, overrides, message):
    with pytest.raises(ValueError, match=message):
        load_dataset(small_config("digits", data_dir, **overrides))


@pytest.mark.parametrize("name,shape", [("mnist", (28, 28, 1)), ("cifar10", (32, 32, 3))])
def test_catalog_images_through_the_same_pipeline(tmp_path, name, shape):
    config = small_config(name, tmp_path)
    with tfds.testing.mock_data(num_examples=20):
        dataset = load_dataset(config)
        batch = next(dataset.train_iterator(seed=0, batch_size=8))
        evals = dataset.eval_batches("test", batch_size=8)
        resized = load_dataset(small_config(name, tmp_path, image_size=12))
        resized = next(resized.train_iterator(seed=0, batch_size=2))
    info = dataset.info
    assert (info.num_classes, info.image_shape, info.eval_splits) == (10, shape, ("test",))
    assert batch["inputs"].shape == (8, *shape) and batch["inputs"].dtype == np.float32
    assert batch["inputs"].min() >= 0.0 and batch["inputs"].max() <= 1.0
    assert batch["label"].dtype == np.int32 and set(batch["label"].tolist()) <= set(range(10))
    assert len(evals) == 3 and sum(float(b["example_weights"].sum()) for b in evals) == 20
    assert resized["inputs"].shape == (2, 12, 12, shape[2])
