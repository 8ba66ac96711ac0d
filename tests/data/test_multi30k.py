"""Multi30k: the TFDS builder on the fixture (splits, pairing, directions, manual_dir), the
joint SentencePiece vocabulary cache, length buckets and the text references."""

import dataclasses
import gzip
import shutil
from pathlib import Path

import pytest
import tensorflow_datasets as tfds
from data_fixtures import all_rows, small_config, unpadded

from transformer_jax.data import EOS_ID, describe_dataset, load_dataset, multi30k, tokenizers

FIXTURE = Path(__file__).parent / "fixtures" / "multi30k"
SIZES = {"train": 20, "validation": 5, "test": 6}


def raw(split: str, language: str) -> list[str]:
    stem = multi30k.SPLIT_FILES[split]
    with gzip.open(FIXTURE / f"{stem}.{language}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def config(data_dir, **overrides):
    """The fixture with a vocabulary it can fill (its sentences are then up to 79 tokens)."""
    fields = {
        "manual_dir": str(FIXTURE),
        "spm_vocab_size": 300,
        "max_input_len": 80,
        "max_target_len": 81,
        "eval_max_len": 96,
        "length_buckets": (24,),
    }
    return small_config("multi30k", data_dir, **{**fields, **overrides})


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("multi30k")


def test_builder_splits_hold_the_line_pairs_in_file_order(tmp_path):
    builder = multi30k.make_builder("de", "en", data_dir=str(tmp_path), manual_dir=str(FIXTURE))
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(FIXTURE))
    )
    assert builder.info.supervised_keys == ("de", "en")
    assert {s: builder.info.splits[s].num_examples for s in SIZES} == SIZES
    name = f"multi30k/{builder.builder_config.name}"
    for split in SIZES:
        source = tfds.data_source(name, split=split, data_dir=str(tmp_path))
        pairs = [(source[i]["de"].decode(), source[i]["en"].decode()) for i in range(len(source))]
        assert pairs == list(zip(raw(split, "de"), raw(split, "en"), strict=True))


def test_other_files_than_the_pinned_ones_get_their_own_config_name(tmp_path):
    fixture = multi30k.make_builder("de", "en", data_dir=str(tmp_path), manual_dir=str(FIXTURE))
    pinned = multi30k.make_builder("de", "en", data_dir=str(tmp_path))
    assert pinned.builder_config.name == "de-en"
    assert pinned.builder_config.sha256 == multi30k.PINNED_SHA256
    assert fixture.builder_config.name.startswith("de-en-")
    assert multi30k.content_id(multi30k.PINNED_SHA256) == ""
    # The pinned checksums are what TFDS verifies a download against.
    url_infos = multi30k.Multi30k.url_infos
    assert sorted(url_infos) == sorted(multi30k.URL + f for f in multi30k.FILES)
    assert url_infos[multi30k.URL + "train.de.gz"].checksum == multi30k.PINNED_SHA256["train.de.gz"]


def test_without_a_manual_dir_the_files_are_downloaded_and_checked(tmp_path, monkeypatch):
    requested = {}

    def download(self, urls):  # offline stand-in: the fixture, which is not the pinned data
        requested.update(urls)
        return {name: FIXTURE / name for name in urls}

    monkeypatch.setattr(tfds.download.DownloadManager, "download", download)
    builder = multi30k.make_builder("de", "en", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"do not have the content this config \('de-en'\)"):
        builder.download_and_prepare()
    assert requested == {name: multi30k.URL + name for name in multi30k.FILES}


def test_edited_files_are_a_new_dataset(tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(FIXTURE, edited)
    with gzip.open(edited / "val.en.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(["An edited caption."] * 5) + "\n")
    old = multi30k.make_builder("de", "en", data_dir=str(tmp_path), manual_dir=str(FIXTURE))
    new = multi30k.make_builder("de", "en", data_dir=str(tmp_path), manual_dir=str(edited))
    assert old.builder_config.name != new.builder_config.name


@pytest.mark.parametrize("source, target", [("de", "en"), ("en", "de")])
def test_both_directions_pair_source_and_target(data_dir, source, target):
    dataset = load_dataset(config(data_dir, source_language=source, target_language=target))
    info = dataset.info
    assert info.kind == "seq2seq" and info.eval_splits == ("validation", "test")
    batches = dataset.eval_batches("test", batch_size=4)
    pairs = list(zip(raw("test", source), raw("test", target), strict=True))
    rows = zip(all_rows(batches, "inputs"), all_rows(batches, "targets"), strict=True)
    for (x, y), (source_text, target_text) in zip(rows, pairs, strict=True):
        assert unpadded(x).tolist() == info.tokenizer.encode(source_text)
        assert unpadded(y).tolist() == info.tokenizer.encode(target_text) + [EOS_ID]
    assert dataset.text_pairs("test") == pairs
    assert dataset.text_pairs("validation", max_examples=2) == list(
        zip(raw("validation", source)[:2], raw("validation", target)[:2], strict=True)
    )


def test_eval_rows_are_padded_to_eval_max_len_and_train_rows_to_their_bucket(data_dir):
    dataset = load_dataset(config(data_dir, eval_max_len=100))
    info = dataset.info
    assert (info.max_input_len, info.max_target_len) == (100, 100)
    assert info.padded_lengths("train") == (80, 81)
    assert dataset.eval_batches("validation", batch_size=2)[0]["inputs"].shape == (2, 100)
    iterator = dataset.train_iterator(seed=0, batch_size=1)
    seen = []
    for batch in (next(iterator) for _ in range(SIZES["train"])):  # one epoch
        (x,), (y,) = batch["inputs"], batch["targets"]
        short = len(unpadded(x)) <= 24 and len(unpadded(y)) <= 24  # y holds EOS
        assert (x.shape, y.shape) == (((24,), (24,)) if short else ((80,), (81,)))
        assert unpadded(y)[-1] == EOS_ID
        seen.append((info.tokenizer.decode(x), info.tokenizer.decode(y)))
    assert {x.shape[1] for x in (next(iterator)["inputs"] for _ in range(20))} == {24, 80}
    state, expected = iterator.get_state(), next(iterator)  # a resumed iterator continues
    resumed = dataset.train_iterator(seed=0, batch_size=1)
    resumed.set_state(state)
    assert next(resumed)["inputs"].tolist() == expected["inputs"].tolist()
    assert sorted(seen) == sorted(zip(raw("train", "de"), raw("train", "en"), strict=True))


def test_its_registered_facts_are_the_built_datas(data_dir):
    """`describe_dataset` (what the ahead-of-time compiler sees, nothing read) gives the info
    the built data has, but for the tokenizer it cannot have without the data."""
    cfg = config(data_dir, eval_max_len=100)
    built = dataclasses.replace(load_dataset(cfg).info, tokenizer=None)
    assert describe_dataset(cfg) == built


def test_vocabulary_is_joint_cached_and_shared_by_both_directions(data_dir, monkeypatch):
    info = load_dataset(config(data_dir)).info
    path = Path(info.tokenizer.model_path)
    assert path.is_relative_to(data_dir / "multi30k") and path.name.startswith("spm_unigram_v300")
    # Both languages are in it: every training sentence round-trips without unknown pieces.
    for language in ("de", "en"):
        for line in raw("train", language):
            assert 3 not in info.tokenizer.encode(line)  # unk id
            assert info.tokenizer.decode(info.tokenizer.encode(line)) == line

    def no_training(*args, **kwargs):
        raise AssertionError("the cached vocabulary should have been loaded")

    monkeypatch.setattr(tokenizers, "train_sentencepiece", no_training)
    other = load_dataset(config(data_dir, source_language="en", target_language="de")).info
    assert other.tokenizer.model_path == info.tokenizer.model_path
    with pytest.raises(AssertionError, match="cached"):  # another size is another vocabulary
        load_dataset(config(data_dir, spm_vocab_size=250))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("manual_dir", "/nonexistent", r"data.manual_dir='/nonexistent' is invalid.*missing"),
        ("source_language", "fr", r"data.source_language='fr' is invalid; valid: one of"),
        ("target_language", "de", r"data.target_language='de' is invalid; valid: a language"),
        ("length_buckets", (24, 16), r"data.length_buckets=\(24, 16\) is invalid; valid: incr"),
        ("length_buckets", (81,), r"data.length_buckets=\(81,\) is invalid"),
        ("eval_max_len", 80, r"data.eval_max_len=80 is invalid; valid: >= max"),
    ],
)
def test_bad_fields_are_named(tmp_path, field, value, message):
    """By the data, and (but for the raw files) by the facts the compiler reads instead."""
    cfg = config(tmp_path, **{field: value})
    with pytest.raises(ValueError, match=message):
        load_dataset(cfg)
    if field != "manual_dir":
        with pytest.raises(ValueError, match=message):
            describe_dataset(cfg)


def test_text_pairs_need_a_translation_dataset(tmp_path):
    with pytest.raises(ValueError, match=r"data.name='copy' is invalid; valid: a translation"):
        load_dataset(small_config("copy", tmp_path)).text_pairs("test")


@pytest.mark.parametrize("damage", ["cut short", "not gzip"])
def test_a_damaged_raw_file_is_named(tmp_path, damage):
    path = tmp_path / "train.de.gz"
    good = gzip.compress("ein Hund läuft\n".encode() * 200)
    content = {
        "cut short": good[: len(good) // 2],
        "not gzip": b"<html>rate limited</html>",
    }[damage]
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"Multi30k file {path} is damaged"):
        multi30k.read_lines(path)


def test_a_raw_file_not_in_utf8_is_named_with_its_first_bad_byte(tmp_path):
    """A manual_dir file saved as Latin-1: the file, the byte's offset in the uncompressed text
    and its line, before anything is built or a vocabulary trained."""
    manual = tmp_path / "raw"
    shutil.copytree(FIXTURE, manual)
    lines = [line.encode("utf-8") for line in raw("train", "de")]
    lines[2] = "Ein Hund läuft.".encode("latin-1")  # line 3; 'ä' is one byte, 0xe4
    offset = len(lines[0]) + len(lines[1]) + 2 + len("Ein Hund l")
    (manual / "train.de.gz").write_bytes(gzip.compress(b"\n".join(lines)))
    data_dir = tmp_path / "data"
    with pytest.raises(ValueError) as error:
        load_dataset(config(data_dir, manual_dir=str(manual)))
    assert str(error.value).startswith(
        f"Multi30k file {manual / 'train.de.gz'}, uncompressed, is not UTF-8 text (invalid byte "
        f"at offset {offset}: 0xe4, line 3); valid: UTF-8 text"
    )
    assert not data_dir.exists()  # nothing prepared, no vocabulary trained
