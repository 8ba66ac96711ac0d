"""Bad data configs fail before training with a ValueError naming field, value and valid set."""

import pytest
from data_fixtures import small_config

from transformer_jax.data import default_data_config, load_dataset


def _error(config) -> str:
    with pytest.raises(ValueError) as info:
        load_dataset(config)
    return str(info.value)


def test_unknown_dataset_name_lists_valid_names(tmp_path):
    with pytest.raises(ValueError, match=r"data.name='cpoy' .*valid: \[.*'copy'.*'reverse'"):
        default_data_config("cpoy")
    config = small_config("copy", tmp_path)
    config.name = "revrse"
    assert "'wmt14_translate/de-en'" in _error(config)


def test_unknown_field_and_wrong_type(tmp_path):
    config = small_config("copy", tmp_path).to_dict()
    config["num_symbol"] = 5
    assert "data.num_symbol=5 is not a field of dataset 'copy'" in _error(config)
    assert "'num_symbols'" in _error(config)
    config = small_config("copy", tmp_path).to_dict()
    config["max_len"] = "20"
    assert "data.max_len='20' has type str; valid: a value of type int" in _error(config)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"min_len": 0}, "data.min_len=0 is invalid; valid: an integer >= 1"),
        ({"min_len": 9}, "data.max_len=8 is invalid; valid: >= min_len=9"),
        ({"long_min_len": 8}, "data.long_min_len=8 is invalid; valid: > max_len=8"),
        ({"long_max_len": 8}, "data.long_max_len=8 is invalid; valid: >= long_min_len=9"),
        ({"num_train": 0}, "data.num_train=0 is invalid"),
        ({"num_symbols": 1}, "data.num_symbols=1 is invalid; valid: 2 .."),
        ({"max_input_len": 10}, "data.max_input_len=10 is invalid; valid: -1 (derive) or >= 12"),
        ({"max_target_len": 12}, "data.max_target_len=12 is invalid; valid: -1 (derive) or >= 13"),
    ],
)
def test_bad_algorithmic_lengths(tmp_path, overrides, message):
    assert message in _error(small_config("reverse", tmp_path, **overrides))
    assert not (tmp_path / "algorithmic_seq2seq").exists()  # nothing built


def test_addition_max_lengths_count_operands_and_carry(tmp_path):
    message = _error(small_config("addition", tmp_path, max_target_len=9))
    assert "data.max_target_len=9 is invalid; valid: -1 (derive) or >= 10" in message


def test_text_file_problems(tmp_path):
    def error_for(path, **overrides):
        return _error(small_config("text_file", tmp_path, path=str(path), **overrides))

    assert "data.path='' is invalid; valid: the path of a UTF-8 text file" in error_for("")
    assert "an existing file" in error_for(tmp_path / "missing.txt")
    assert "an existing file" in error_for(tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert "a non-empty text file" in error_for(empty)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    assert "is not UTF-8 text (invalid byte at offset 3: 0xe9, line 1)" in error_for(latin1)
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("abcdefghij", encoding="utf-8")
    assert "data.seq_len=128 is invalid; valid: <= 9" in error_for(tiny)
    assert "data.validation_fraction=1.5" in error_for(tiny, validation_fraction=1.5)
    assert "data.validation_fraction=nan" in error_for(tiny, validation_fraction=float("nan"))
    assert "every split" in error_for(
        tmp_path / "one.txt" if (tmp_path / "one.txt").write_text("a") else ""
    )


def test_bad_api_arguments(tmp_path):
    dataset = load_dataset(small_config("copy", tmp_path))
    with pytest.raises(
        ValueError,
        match=r"split='valid' is invalid; valid: one of \('train', 'test', 'test_long'\)",
    ):
        dataset.eval_batches("valid", batch_size=4)
    with pytest.raises(ValueError, match="batch_size=0 is invalid"):
        dataset.train_iterator(seed=0, batch_size=0)
    with pytest.raises(ValueError, match="max_examples=0 is invalid"):
        dataset.eval_batches("test", batch_size=4, max_examples=0)


def test_wmt_languages(tmp_path):
    config = small_config("wmt14_translate/de-en", tmp_path, source_language="fr")
    assert "data.source_language='fr' is invalid; valid: one of ('de', 'en')" in _error(config)
    config = small_config("wmt14_translate/de-en", tmp_path, target_language="en")
    assert "a language other than source_language='en'" in _error(config)
