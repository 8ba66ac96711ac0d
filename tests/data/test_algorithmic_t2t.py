"""data.variant="t2t" (tensor2tensor's algorithmic_*_decimal40) and data.test_lengths."""

import numpy as np
import pytest
from data_fixtures import all_rows, small_config, unpadded

from transformer_jax.data import EOS_ID, load_dataset
from transformer_jax.data import algorithmic as alg


def _digits(ids) -> str:
    return "".join("0123456789+"[i - 3] for i in ids)


@pytest.mark.parametrize("exact_len", [False, True])
def test_t2t_addition_is_little_endian_with_tensor2tensor_operand_lengths(exact_len):
    length = 12
    examples = alg.t2t_examples(
        "addition", np.random.default_rng(0), 3000, max_len=length, exact_len=exact_len
    )
    first_lengths = set()
    for x, y in examples:
        a, b = _digits(x).split("+")
        first_lengths.add(len(a))
        assert 1 <= len(a) <= length // 2 and 1 <= len(b) <= length - len(a) - 1
        assert len(x) == length if exact_len else len(x) <= length
        for operand in (a, b):  # least significant first, no leading zero at the end
            assert operand[-1] != "0" or operand == "0"
        assert int(_digits(y)[::-1]) == int(a[::-1]) + int(b[::-1])
        assert _digits(y)[-1] != "0" or len(y) == 1
        assert len(y) + 1 <= alg.max_lengths("addition", length, "t2t")[1]  # sum and EOS fit
    assert first_lengths == set(range(1, length // 2 + 1))


def test_t2t_symbol_lengths_are_uniform_from_one():
    examples = alg.t2t_examples(
        "reverse", np.random.default_rng(0), 2000, max_len=9, exact_len=False
    )
    assert {len(x) for x, _ in examples} == set(range(1, 10))
    for x, y in examples:
        np.testing.assert_array_equal(y, x[::-1])
        assert ((x >= 3) & (x < 13)).all()
    exact = alg.t2t_examples("copy", np.random.default_rng(0), 50, max_len=9, exact_len=True)
    assert {len(x) for x, _ in exact} == {9}


def test_t2t_dataset_has_dev_like_test_long_and_one_split_per_test_length(tmp_path):
    config = small_config(
        "addition", tmp_path, variant="t2t", max_len=10, long_max_len=30, test_lengths=(20, 40)
    )
    info = load_dataset(config).info
    assert info.eval_splits == ("test", "test_long", "test_len20", "test_len40")
    assert (info.max_input_len, info.max_target_len) == (40, 40)
    assert info.padded_lengths("train") == (10, 10)
    assert info.padded_lengths("test_len20") == (20, 20)
    assert info.padded_lengths("test_long") == (30, 30)
    for split, check in {
        "test_len20": lambda n: n == 20,
        "test_long": lambda n: 1 <= n <= 30,
        "test_len40": lambda n: n == 40,
    }.items():
        batches = load_dataset(config).eval_batches(split, batch_size=16, max_examples=None)
        inputs, targets = all_rows(batches, "inputs"), all_rows(batches, "targets")
        assert len(inputs) == (config.num_test_long if split == "test_long" else config.num_test)
        lengths = [len(unpadded(x)) for x in inputs]
        assert all(check(n) for n in lengths), (split, lengths)
        for x, y in zip(inputs, targets, strict=True):
            answer = unpadded(y)
            assert answer[-1] == EOS_ID
            a, b = _digits(unpadded(x)).split("+")
            assert int(_digits(answer[:-1])[::-1]) == int(a[::-1]) + int(b[::-1])
    # tensor2tensor's dev split draws lengths from 1, not from past the training lengths.
    long_batches = load_dataset(config).eval_batches("test_long", batch_size=16, max_examples=None)
    assert min(len(unpadded(x)) for x in all_rows(long_batches, "inputs")) <= 10


def test_test_lengths_work_with_the_default_variant_too(tmp_path):
    config = small_config("copy", tmp_path, test_lengths=(16,))
    dataset = load_dataset(config)
    assert dataset.info.eval_splits == ("test", "test_long", "test_len16")
    batches = dataset.eval_batches("test_len16", batch_size=16, max_examples=None)
    assert {len(unpadded(x)) for x in all_rows(batches, "inputs")} == {16}


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("sort", {"variant": "t2t"}, r"data.name='sort' is invalid; valid: one of"),
        ("copy", {"variant": "t2t", "min_len": 2}, r"data.min_len=2 is invalid"),
        ("copy", {"variant": "tf"}, r"data.variant='tf' is invalid; valid: .*'t2t'"),
        ("copy", {"test_lengths": (0,)}, r"data.test_lengths=\(0,\) is invalid"),
        (
            "addition",
            {"variant": "t2t", "reverse_answer": True},
            r"data.reverse_answer=True is invalid; valid: False with variant='t2t'",
        ),
    ],
)
def test_invalid_variant_configs_name_the_field(tmp_path, name, overrides, message):
    with pytest.raises(ValueError, match=message):
        load_dataset(small_config(name, tmp_path, **overrides))


def test_prompt_layout_scores_only_the_answer_of_one_decoder_only_row(tmp_path):
    config = small_config("reverse", tmp_path, layout="prompt", test_lengths=(10,))
    dataset = load_dataset(config)
    info = dataset.info
    assert info.kind == "lm" and info.max_input_len == 0
    assert info.vocab_size == 3 + config.num_symbols + 1  # the separator "="
    assert info.padded_lengths("train") == (0, 8 + 1 + 9)
    assert info.padded_lengths("test_len10") == (0, 10 + 1 + 11)
    batches = dataset.eval_batches("test", batch_size=16, max_examples=None)
    rows, weights = all_rows(batches, "targets"), all_rows(batches, "targets_weights")
    for row, weight in zip(rows, weights, strict=True):
        text = info.tokenizer.decode(row)
        prompt, answer = text.split("=")
        assert answer == prompt[::-1]
        ids = unpadded(row)
        scored = ids[weight[: len(ids)] == 1.0]
        np.testing.assert_array_equal(scored[:-1], ids[len(prompt) + 1 : -1])
        assert scored[-1] == EOS_ID and weight.sum() == len(answer) + 1
