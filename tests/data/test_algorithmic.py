"""Algorithmic tasks: generated contents against reference math, lengths, determinism, caching."""

from pathlib import Path

import numpy as np
import pytest
from data_fixtures import all_rows, small_config, unpadded

from transformer_jax.data import EOS_ID, load_dataset
from transformer_jax.data import algorithmic as alg
from transformer_jax.data.tokenizers import symbol_alphabet


def _split_rows(config, split):
    batches = load_dataset(config).eval_batches(split, batch_size=64)
    return all_rows(batches, "inputs"), all_rows(batches, "targets")


def _answer(target_row):
    """Target tokens before EOS; asserts EOS follows them and only padding after."""
    ids = unpadded(target_row)
    assert ids[-1] == EOS_ID and EOS_ID not in ids[:-1]
    return ids[:-1]


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_symbol_tasks_contents_and_lengths(tmp_path, task):
    config = small_config(task, tmp_path)
    info = load_dataset(config).info
    assert info.kind == "seq2seq" and info.vocab_size == 3 + config.num_symbols
    assert (info.max_input_len, info.max_target_len) == (12, 13)  # long_max_len, + EOS
    assert info.eval_splits == ("test", "test_long")
    # Only test_long is padded to its long sequences; train and test to max_len (+ EOS).
    padded = {"train": (8, 9), "test": (8, 9), "test_long": (12, 13)}
    assert {split: info.padded_lengths(split) for split in padded} == padded
    reference = {"copy": lambda x: x, "reverse": lambda x: x[::-1], "sort": np.sort}[task]
    ranges = {"train": (1, 8), "test": (1, 8), "test_long": (9, 12)}
    for split, (low, high) in ranges.items():
        inputs, targets = _split_rows(config, split)
        assert (len(inputs[0]), len(targets[0])) == padded[split]
        assert len(inputs) == {"train": 300, "test": 50, "test_long": 30}[split]
        lengths = []
        for x_row, y_row in zip(inputs, targets, strict=True):
            x = unpadded(x_row)
            lengths.append(len(x))
            assert ((x >= 3) & (x < 3 + config.num_symbols)).all()
            np.testing.assert_array_equal(_answer(y_row), reference(x))
        assert low <= min(lengths) and max(lengths) <= high
        if split == "train":  # uniform lengths: both ends of the range occur
            assert {low, high} <= set(lengths)


def test_sort_prints_sorted_text(tmp_path):
    info = load_dataset(small_config("sort", tmp_path)).info
    inputs, targets = _split_rows(small_config("sort", tmp_path), "test")
    text_in, text_out = info.tokenizer.decode(inputs[0]), info.tokenizer.decode(targets[0])
    assert text_out == "".join(sorted(text_in))


@pytest.mark.parametrize("reverse_answer", [False, True])
def test_addition_is_arithmetically_right(tmp_path, reverse_answer):
    config = small_config("addition", tmp_path, reverse_answer=reverse_answer)
    info = load_dataset(config).info
    assert info.vocab_size == 3 + len("0123456789+")
    assert (info.max_input_len, info.max_target_len) == (17, 10)  # 8+1+8; 9 digits + EOS
    for split, (low, high) in {"train": (1, 5), "test_long": (6, 8)}.items():
        inputs, targets = _split_rows(config, split)
        for x_row, y_row in zip(inputs, targets, strict=True):
            a, b = info.tokenizer.decode(x_row).split("+")
            answer = info.tokenizer.decode(y_row)
            assert low <= len(a) <= high and low <= len(b) <= high
            assert a[0] != "0" or a == "0"  # digit counts are exact: no leading zeros
            total = answer[::-1] if reverse_answer else answer
            assert int(total) == int(a) + int(b)
            assert total == str(int(a) + int(b))


def test_addition_generator_handles_carries():
    rng = np.random.default_rng(0)
    for x, y in alg.generate_examples("addition", rng, 2000, min_len=1, max_len=3):
        text_in = "".join("0123456789+"[i - 3] for i in x)
        a, b = text_in.split("+")
        assert "".join(str(d - 3) for d in y) == str(int(a) + int(b))


def test_generation_is_deterministic_and_params_get_their_own_cache(tmp_path):
    a = small_config("reverse", tmp_path / "a")
    b = small_config("reverse", tmp_path / "b")  # same params, separate build
    rows_a, rows_b = _split_rows(a, "train"), _split_rows(b, "train")
    np.testing.assert_array_equal(np.stack(rows_a[0]), np.stack(rows_b[0]))

    other = small_config("reverse", tmp_path / "a", num_symbols=5)
    assert load_dataset(other).info.vocab_size == 8
    other_rows = _split_rows(other, "train")[0]
    assert max(int(r.max()) for r in other_rows) < 8  # not the cached 10-symbol data
    names = sorted(p.name for p in (Path(tmp_path) / "a" / "algorithmic_seq2seq").iterdir())
    assert names == [
        "reverse-sym10-len1to8-long9to12-n300-50-30-seed0",
        "reverse-sym5-len1to8-long9to12-n300-50-30-seed0",
    ]
    reseeded = small_config("reverse", tmp_path / "a", data_seed=1)
    assert not np.array_equal(np.stack(_split_rows(reseeded, "train")[0]), np.stack(rows_a[0]))


def test_validation_is_a_split_of_its_own_that_changes_no_other(tmp_path):
    with_val = small_config("reverse", tmp_path / "v", num_validation=40)
    without = small_config("reverse", tmp_path / "n", num_validation=0)
    info = load_dataset(with_val).info
    assert info.eval_splits == ("test", "test_long", "validation")
    assert load_dataset(without).info.eval_splits == ("test", "test_long")
    for split in ("train", "test", "test_long"):
        a, b = _split_rows(with_val, split), _split_rows(without, split)
        np.testing.assert_array_equal(np.stack(a[0]), np.stack(b[0]))
        np.testing.assert_array_equal(np.stack(a[1]), np.stack(b[1]))
    inputs, targets = _split_rows(with_val, "validation")
    assert len(inputs) == 40 and info.padded_lengths("validation") == (8, 9)
    for x_row, y_row in zip(inputs, targets, strict=True):
        assert 1 <= len(unpadded(x_row)) <= 8
        np.testing.assert_array_equal(_answer(y_row), unpadded(x_row)[::-1])
    test = {tuple(unpadded(r)) for r in _split_rows(with_val, "test")[0]}
    # Drawn apart from test: not a copy of it (short sequences may still coincide).
    assert {tuple(unpadded(r)) for r in inputs} != test


def test_num_test_long_zero_drops_the_split(tmp_path):
    config = small_config("copy", tmp_path, num_test_long=0)
    info = load_dataset(config).info
    assert info.eval_splits == ("test",)
    assert info.max_input_len == 8  # longest train sequence only


def test_symbol_alphabet_is_sorted_printable_and_long():
    alphabet = symbol_alphabet(100)
    assert len(set(alphabet)) == 100 and list(alphabet) == sorted(alphabet)
    assert all(c.isprintable() for c in alphabet)
    assert alphabet[:10] == "0123456789"
