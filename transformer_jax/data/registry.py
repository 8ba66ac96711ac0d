"""The one place that maps `config.data.name` to its documented defaults, its `DataSource` and
its facts (`DATASETS`); `load_dataset`, which checks a `config.data` against them and builds it,
and `describe_dataset`, which gives its DatasetInfo without reading (or downloading) the data."""

import dataclasses
import os
from collections.abc import Callable

import ml_collections

from transformer_jax import fields as F
from transformer_jax.data.algorithmic_data import AlgorithmicData, algorithmic_info
from transformer_jax.data.api import Dataset, DataSource
from transformer_jax.data.char_lm import (
    SHAKESPEARE_SHA256,
    shakespeare_char_data,
    text_file_data,
    tiny_shakespeare_data,
    tiny_shakespeare_info,
)
from transformer_jax.data.image_data import catalog_image_data, catalog_image_info, digits_data
from transformer_jax.data.info import DatasetInfo
from transformer_jax.data.sentencepiece_data import (
    Lm1bData,
    Multi30kData,
    TranslationData,
    lm1b_info,
    translation_info,
)
from transformer_jax.registry import Registry

DEFAULT_DATA_DIR = "~/tensorflow_datasets"


def _common(name: str) -> ml_collections.ConfigDict:
    """The fields every dataset has; a dataset's own defaults follow them."""
    c = ml_collections.ConfigDict()
    c.name = name  # dataset name; one of DATASETS
    c.data_dir = os.path.expanduser(DEFAULT_DATA_DIR)  # where TFDS data is built and read
    c.batch_size = 64  # examples (rows) per training batch
    return c


def _algorithmic(name: str) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    if name == "addition":
        c.min_len = 1  # fewest digits per operand in train/test
        c.max_len = 5  # most digits per operand in train/test
        c.long_min_len = 6  # fewest digits per operand in test_long (> max_len)
        c.long_max_len = 8  # most digits per operand in test_long
        c.reverse_answer = False  # write the sum least significant digit first
    else:
        c.num_symbols = 10  # distinct symbols, token ids 3 .. 3 + num_symbols - 1
        c.min_len = 1  # shortest train/test sequence, in symbols
        c.max_len = 20  # longest train/test sequence, in symbols
        c.long_min_len = 21  # shortest test_long sequence, in symbols (> max_len)
        c.long_max_len = 40  # longest test_long sequence, in symbols
    c.num_train = 100_000  # training examples generated (epochs reshuffle them)
    c.num_test = 1_000  # test examples (same lengths as train)
    c.num_test_long = 1_000  # test_long examples for length generalisation; 0 = no test_long
    # validation examples (same lengths as train, drawn apart from test), the split a sweep's
    # nuisance settings are chosen on (docs/tuning.md); 0 = none (adding one changes no other)
    c.num_validation = 0
    c.data_seed = 0  # seed that generates the dataset (part of its cache name)
    c.max_input_len = -1  # padded inputs length in tokens; -1 = longest possible input
    c.max_target_len = -1  # padded targets length in tokens incl. EOS; -1 = longest + 1
    # default: the layout above; t2t: tensor2tensor's algorithmic_*_decimal40 generators (copy,
    # reverse, addition; min_len=1, lengths count input tokens, addition is little-endian with a
    # separator; test_long draws lengths 1..long_max_len, as its dev split; long_min_len unused).
    c.variant = "default"
    c.test_lengths = ()  # extra eval splits test_len<L>, num_test examples all of length L
    # seq2seq: inputs and targets (encoder-decoder); prompt: one row "inputs = answer" with the
    # loss on the answer only, for a decoder-only model (an "lm" dataset).
    c.layout = "seq2seq"
    # Rows per batch: none, mixed lengths padded to the split's longest; t2t, tensor2tensor's
    # length buckets; each, one length per batch; a bucketed batch is padded to about its longest.
    c.bucket_by_length = "none"
    return c


def _text_file(name: str) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.path = ""  # UTF-8 text file to model (required)
    c.validation_fraction = 0.1  # fraction of characters, before the test ones, for validation
    c.test_fraction = 0.0  # fraction of characters, taken from the end, for test; 0 = no test
    c.seq_len = 128  # characters per row
    c.packing = False  # False: windows of the text; True: packed paragraphs + EOS
    return c


def _shakespeare_char(name: str) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.path = ""  # karpathy/char-rnn's data/tinyshakespeare/input.txt (required; docs/configs.md)
    c.sha256 = SHAKESPEARE_SHA256  # the file's expected SHA-256; another file is refused
    c.seq_len = 128  # characters per row
    c.packing = False  # False: windows of the text; True: packed paragraphs + EOS
    return c


def _tiny_shakespeare(name: str) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seq_len = 128  # characters per row
    c.packing = False  # False: windows of the text; True: packed paragraphs + EOS
    return c


def _lm1b(name: str) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seq_len = 128  # tokens per row; longer sentences are truncated
    c.packing = True  # pack several sentences per row (segment ids + positions)
    c.spm_vocab_size = 32_000  # SentencePiece vocabulary size, incl. pad/bos/eos/unk
    c.spm_max_chars = 10_000_000  # characters of the train split used to train SentencePiece
    return c


def _wmt14(name: str) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.source_language = "en"  # language of "inputs"; "de" or "en"
    c.target_language = "de"  # language of "targets"; "de" or "en"
    c.max_input_len = 256  # padded inputs length in tokens; longer training pairs are dropped
    c.max_target_len = 256  # padded targets length in tokens incl. EOS
    c.spm_vocab_size = 32_000  # joint SentencePiece vocabulary size, incl. pad/bos/eos/unk
    c.spm_max_chars = 10_000_000  # characters of the train split used to train SentencePiece
    return c


def _multi30k(name: str) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.source_language = "de"  # language of "inputs"; "de" or "en"
    c.target_language = "en"  # language of "targets"; "de" or "en"
    c.manual_dir = ""  # directory holding the six raw .gz files (offline); "" = download them
    c.max_input_len = 40  # padded training inputs, tokens; longer training pairs are dropped
    c.max_target_len = 41  # padded training targets, tokens incl. EOS
    c.eval_max_len = 64  # padded validation/test inputs and targets, tokens; longer are cut
    # Training rows are padded to the first of these lengths that holds source and target+EOS,
    # else to max_input_len / max_target_len; every batch is from one bucket. () = no buckets.
    c.length_buckets = (16, 24, 32)
    c.spm_vocab_size = 8_000  # joint SentencePiece vocabulary size, incl. pad/bos/eos/unk
    c.spm_max_chars = 10_000_000  # characters of the train split for SentencePiece (all: 3.8M)
    return c


def _images(name: str) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    if name == "digits":
        c.num_test = 300  # test images, a seeded random subset of the 1,797; the rest train
        c.data_seed = 0  # seed of the train/test split (part of its cache name)
    # Training-only augmentation, reproducible from config.seed; evaluation is never augmented.
    c.random_shift = {"digits": 1, "mnist": 0, "cifar10": 4}[name]  # max translation, pixels
    c.random_flip = name == "cifar10"  # mirror left-right with probability 1/2
    c.image_size = 0  # resize to image_size x image_size pixels (bilinear); 0 = stored size
    return c


@dataclasses.dataclass(frozen=True)
class DatasetEntry:
    """One dataset: its documented default fields of `config.data` (each commented with its
    meaning; `name`, `data_dir` and `batch_size`, which every dataset has, come first), and its
    DataSource, built from a config checked against those defaults (field names and types).

    `describe`, for a dataset that needs a download, gives the DatasetInfo its DataSource would
    have from the checked config alone (a SentencePiece vocabulary has `spm_vocab_size` ids, a
    catalog's images their fixed shape), so that a run's programs can be compiled before (or
    without) fetching it (transformer_jax.aot); None: the data is made locally and cheaply, and
    is built to be described."""

    defaults: Callable[[str], ml_collections.ConfigDict]  # the dataset name -> its own fields
    build: Callable[[ml_collections.ConfigDict], DataSource]
    describe: Callable[[ml_collections.ConfigDict], DatasetInfo] | None = None


DATASETS: Registry[DatasetEntry] = Registry("data.name")
DATASETS.add("copy", DatasetEntry(_algorithmic, AlgorithmicData, algorithmic_info))
DATASETS.add("reverse", DatasetEntry(_algorithmic, AlgorithmicData, algorithmic_info))
DATASETS.add("sort", DatasetEntry(_algorithmic, AlgorithmicData, algorithmic_info))
DATASETS.add("addition", DatasetEntry(_algorithmic, AlgorithmicData, algorithmic_info))
DATASETS.add("text_file", DatasetEntry(_text_file, text_file_data))
DATASETS.add("shakespeare_char", DatasetEntry(_shakespeare_char, shakespeare_char_data))
DATASETS.add(
    "tiny_shakespeare",
    DatasetEntry(_tiny_shakespeare, tiny_shakespeare_data, tiny_shakespeare_info),
)
DATASETS.add("lm1b", DatasetEntry(_lm1b, Lm1bData, lm1b_info))
DATASETS.add("wmt14_translate/de-en", DatasetEntry(_wmt14, TranslationData, translation_info))
DATASETS.add("multi30k", DatasetEntry(_multi30k, Multi30kData, translation_info))
DATASETS.add("digits", DatasetEntry(_images, digits_data))
DATASETS.add("mnist", DatasetEntry(_images, catalog_image_data, catalog_image_info))
DATASETS.add("cifar10", DatasetEntry(_images, catalog_image_data, catalog_image_info))


def _check_name(name) -> None:
    if name not in DATASETS:
        raise ValueError(f"data.name={name!r} is not a known dataset; valid: {sorted(DATASETS)}")


def default_data_config(name: str) -> ml_collections.ConfigDict:
    """Documented default `config.data` for dataset `name` (see the comments in this file)."""
    _check_name(name)
    config = _common(name)
    config.update(DATASETS[name].defaults(name))
    return config


def _same_type(default, value) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    return isinstance(value, type(default))


def checked_config(data_config) -> ml_collections.ConfigDict:
    """`data_config` over the dataset's defaults, after checking field names and types."""
    name = data_config.get("name") if hasattr(data_config, "get") else None
    _check_name(name)
    merged = default_data_config(name)
    for key, value in data_config.items():
        if key not in merged:
            raise ValueError(
                f"data.{key}={value!r} is not a field of dataset {name!r}; "
                f"valid fields: {sorted(merged.keys())}"
            )
        if isinstance(merged[key], tuple) and isinstance(value, list):
            value = tuple(value)  # a tuple read back from a run's config.json
        if not _same_type(merged[key], value):
            raise ValueError(
                f"data.{key}={value!r} has type {type(value).__name__}; "
                f"valid: a value of type {type(merged[key]).__name__}"
            )
        merged[key] = value
    if not merged.data_dir.strip():
        raise ValueError(
            f"data.data_dir={merged.data_dir!r} is empty (the data would be built in the "
            f"current directory); valid: a directory path, e.g. {DEFAULT_DATA_DIR}"
        )
    valid = f"valid: a directory path, new or existing, e.g. {DEFAULT_DATA_DIR}"
    F.check_directory("data.data_dir", merged.data_dir, valid)
    merged.data_dir = os.path.expanduser(merged.data_dir)
    return merged


def load_dataset(data_config: ml_collections.ConfigDict) -> Dataset:
    """The dataset of `config.data`, after checking it and building or preparing the data:
    call it once per run."""
    cfg = checked_config(data_config)
    return Dataset(DATASETS[cfg.name].build(cfg))


def describe_dataset(data_config: ml_collections.ConfigDict, *, build: bool = True):
    """The DatasetInfo a run of `data_config` sees, after checking it: from the entry's
    `describe` where it has one (nothing read, built or downloaded), else from the built data;
    with `build=False` None instead (the data must be read to be described: a text file's
    characters)."""
    cfg = checked_config(data_config)
    entry = DATASETS[cfg.name]
    if entry.describe is not None:
        return entry.describe(cfg)
    return Dataset(entry.build(cfg)).info if build else None
