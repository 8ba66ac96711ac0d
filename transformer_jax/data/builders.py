"""TFDS dataset builders for data that needs no download: algorithmic tasks, a local text file and
scikit-learn's bundled handwritten digits.

Each builder is written as array_record (readable by `tfds.data_source` without TensorFlow).
The builder-config name encodes every generation parameter (or the file's content hash), so
different settings get different cache directories and an edited file is rebuilt.
"""

import contextlib
import dataclasses
import hashlib
import io
import re
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from transformer_jax.data import algorithmic

_TEXT_CHUNK_CHARS = 1 << 16  # characters per stored text example; keeps records small.


def prepare(
    builder: tfds.core.DatasetBuilder, download_config: tfds.download.DownloadConfig | None = None
) -> None:
    """Builds the dataset unless it is already in its data_dir.

    Parallel runs (a sweep) may build the same config at once: each writes a private
    temporary directory, the first rename wins, and the others reuse its result.
    """
    if builder.is_prepared():
        return
    # The run's own line says what is built where; TFDS's progress bars (tqdm: cursor escapes
    # in a log file) and its printed banners (a few hundred characters each) are off meanwhile.
    print(
        f"Building dataset {builder.name}/{builder.builder_config.name} in "
        f"data.data_dir={builder.data_dir_root} (once: later runs read it there).",
        flush=True,
    )
    tfds.display_progress_bar(False)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            builder.download_and_prepare(download_config=download_config)
    except FileExistsError:
        if not builder.is_prepared():
            raise
    finally:
        tfds.display_progress_bar(True)


class _OfflineBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A builder that downloads nothing, so it has no URL-checksums file next to its code."""

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> None:
        # TFDS uses the code path only to find checksums. Its lookup needs the
        # `importlib_resources` backport, which tfds 4.9.10 declares only for Python < 3.9.
        return None


@dataclasses.dataclass
class AlgorithmicConfig(tfds.core.BuilderConfig):
    """Parameters of one algorithmic task; see `algorithmic.generate_examples`."""

    task: str = "copy"
    num_symbols: int = 10
    min_len: int = 1
    max_len: int = 20
    long_min_len: int = 21
    long_max_len: int = 40
    num_train: int = 1000
    num_test: int = 100
    num_test_long: int = 100
    reverse_answer: bool = False
    data_seed: int = 0
    variant: str = "default"  # or "t2t": see algorithmic.t2t_examples
    test_lengths: tuple[int, ...] = ()  # one split "test_len<L>" per length, all of length L
    num_validation: int = 0  # a "validation" split, drawn like test from a stream of its own


# The spawn key of the validation split's random stream (the other splits use 0, 1, 2, ...).
VALIDATION_STREAM = 1_000


def length_split(length: int) -> str:
    """The eval split whose sequences all have `length` symbols (addition: see the variant)."""
    return f"test_len{length}"


def algorithmic_config(**params) -> AlgorithmicConfig:
    """The config, named after every parameter.

    E.g. "reverse-sym10-len1to20-long21to40-n1000-100-100-seed0", with "-t2t", "-at40.400"
    (test_lengths) and "-val1000" (num_validation) appended when set.
    """
    c = AlgorithmicConfig(name="unnamed", **params)
    symbols = "" if c.task == "addition" else f"-sym{c.num_symbols}"
    answer = "-revans" if c.task == "addition" and c.reverse_answer else ""
    variant = "" if c.variant == "default" else f"-{c.variant}"
    at = f"-at{'.'.join(map(str, c.test_lengths))}" if c.test_lengths else ""
    val = f"-val{c.num_validation}" if c.num_validation else ""
    c.name = (
        f"{c.task}{symbols}-len{c.min_len}to{c.max_len}-long{c.long_min_len}to{c.long_max_len}"
        f"-n{c.num_train}-{c.num_test}-{c.num_test_long}-seed{c.data_seed}{answer}{variant}{at}"
        f"{val}"
    )
    return c


class AlgorithmicSeq2seq(_OfflineBuilder, skip_registration=True):
    """Copy / reverse / sort / addition with splits train, test and test_long (longer inputs),
    one test_len<L> split per entry of test_lengths, and validation (num_validation > 0)."""

    name = "algorithmic_seq2seq"
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version."}

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="Algorithmic seq2seq task (Universal Transformer, Dehghani et al. 2019).",
            features=tfds.features.FeaturesDict(
                {
                    "inputs": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                    "targets": tfds.features.Tensor(shape=(None,), dtype=np.int32),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download.
        c = self.builder_config
        # One independent stream per split, so changing num_test never changes the train set
        # (spawned children do not depend on how many are spawned).
        seeds = np.random.SeedSequence(c.data_seed).spawn(3 + len(c.test_lengths))
        # tensor2tensor's dev split (our test_long) draws lengths from 1, like its train split.
        long_min = 1 if c.variant == "t2t" else c.long_min_len
        splits = {
            "train": (seeds[0], c.num_train, c.min_len, c.max_len),
            "test": (seeds[1], c.num_test, c.min_len, c.max_len),
        }
        if c.num_test_long > 0:
            splits["test_long"] = (seeds[2], c.num_test_long, long_min, c.long_max_len)
        for seed, length in zip(seeds[3:], c.test_lengths, strict=True):
            splits[length_split(length)] = (seed, c.num_test, length, length)
        if c.num_validation > 0:
            # A stream of its own (spawn key VALIDATION_STREAM, far past the others), so adding
            # validation changes no other split: train and test stay those of earlier runs.
            seed = np.random.SeedSequence(c.data_seed, spawn_key=(VALIDATION_STREAM,))
            splits["validation"] = (seed, c.num_validation, c.min_len, c.max_len)
        return {name: self._generate_examples(*args) for name, args in splits.items()}

    def _generate_examples(self, seed_seq, num_examples, min_len, max_len):
        c = self.builder_config
        rng = np.random.default_rng(seed_seq)
        if c.variant == "t2t":  # min_len is 1, or max_len for a test_len<L> split
            examples = algorithmic.t2t_examples(
                c.task, rng, num_examples, max_len=max_len, exact_len=min_len == max_len
            )
        else:
            examples = algorithmic.generate_examples(
                c.task,
                rng,
                num_examples,
                min_len=min_len,
                max_len=max_len,
                num_symbols=c.num_symbols,
                reverse_answer=c.reverse_answer,
            )
        for i, (x, y) in enumerate(examples):
            yield i, {"inputs": x, "targets": y}


@dataclasses.dataclass
class TextFileConfig(tfds.core.BuilderConfig):
    """A local UTF-8 text file, identified by the SHA-256 of its bytes."""

    # TFDS logs the config's repr in every run's stderr; the file's location is this machine's,
    # and the name and sha256 already identify the text.
    path: str = dataclasses.field(default="", repr=False)
    sha256: str = ""
    validation_fraction: float = 0.1
    test_fraction: float = 0.0


def text_file_config(
    path: Path, content: bytes, validation_fraction: float, test_fraction: float = 0.0
) -> TextFileConfig:
    """Config named "<file stem>-<16 hex of sha256>-val<fraction>[-test<fraction>]"."""
    sha = hashlib.sha256(content).hexdigest()
    stem = re.sub(r"[^A-Za-z0-9_\-]", "_", path.stem)[:40] or "file"
    test = f"-test{test_fraction!r}" if test_fraction else ""
    return TextFileConfig(
        name=f"{stem}-{sha[:16]}-val{validation_fraction!r}{test}",
        path=str(path),
        sha256=sha,
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
    )


def text_splits(
    text: str, validation_fraction: float, test_fraction: float = 0.0
) -> dict[str, str]:
    """Character split in file order: train, then validation, then (test_fraction > 0) test.

    Train is the first 1 - (validation + test) of the text, so moving characters between
    validation and test leaves train as it was (0.1 + 0 and 0.05 + 0.05 train the same text).
    """
    cut = int(len(text) * (1.0 - (validation_fraction + test_fraction)))
    if not test_fraction:
        return {"train": text[:cut], "validation": text[cut:]}
    test_cut = int(len(text) * (1.0 - test_fraction))
    return {"train": text[:cut], "validation": text[cut:test_cut], "test": text[test_cut:]}


class LocalTextFile(_OfflineBuilder, skip_registration=True):
    """Char-level LM data from a text file: splits train / validation (/ test), in file order.

    Examples are consecutive chunks of the split's text ("text"); the metadata holds the
    vocabulary, the sorted set of the file's characters.
    """

    name = "local_text_file"
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version."}

    def _read_text(self) -> str:
        c = self.builder_config
        content = Path(c.path).read_bytes()
        if hashlib.sha256(content).hexdigest() != c.sha256:
            raise ValueError(f"data.path={c.path!r} changed while its dataset was being built")
        return content.decode("utf-8")

    def _info(self) -> tfds.core.DatasetInfo:
        # Only building needs the vocabulary; reading restores it from metadata.json.
        metadata = tfds.core.MetadataDict()
        if not self.is_prepared() and self.builder_config.path:
            metadata["vocabulary"] = "".join(sorted(set(self._read_text())))
        return tfds.core.DatasetInfo(
            builder=self,
            description=f"Characters of {self.builder_config.path}.",
            features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
            metadata=metadata,
            # Keep chunks in file order: the pipeline concatenates them back into the text.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download.
        c = self.builder_config
        parts = text_splits(self._read_text(), c.validation_fraction, c.test_fraction)
        return {name: self._generate_examples(text) for name, text in parts.items()}

    def _generate_examples(self, text: str):
        for i, start in enumerate(range(0, len(text), _TEXT_CHUNK_CHARS)):
            yield i, {"text": text[start : start + _TEXT_CHUNK_CHARS]}


DIGITS_NUM_EXAMPLES = 1797  # sklearn.datasets.load_digits: 8x8 images, pixel values 0..16
DIGITS_MAX_VALUE = 16


@dataclasses.dataclass
class DigitsConfig(tfds.core.BuilderConfig):
    """A seeded train/test split of the digits; see `Digits`."""

    num_test: int = 300
    data_seed: int = 0


def digits_config(num_test: int, data_seed: int) -> DigitsConfig:
    """Config named after its split, e.g. "test300-seed0"."""
    return DigitsConfig(
        name=f"test{num_test}-seed{data_seed}", num_test=num_test, data_seed=data_seed
    )


def digits_split_indices(num_test: int, data_seed: int) -> dict[str, np.ndarray]:
    """Sorted indices into load_digits() of each split: a seeded permutation, test first."""
    order = np.random.default_rng(data_seed).permutation(DIGITS_NUM_EXAMPLES)
    return {"train": np.sort(order[num_test:]), "test": np.sort(order[:num_test])}


class Digits(_OfflineBuilder, skip_registration=True):
    """UCI handwritten digits as bundled with scikit-learn: 1,797 8x8 grey images, 10 classes.

    Pixels are stored as scikit-learn gives them, uint8 counts 0..16 (the number of set pixels in
    each 4x4 block of the original 32x32 bitmap); "id" is the index in `load_digits()`.
    """

    name = "sklearn_digits"
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version."}

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="Optical recognition of handwritten digits (UCI), via scikit-learn.",
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(shape=(8, 8, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=10),
                    "id": tfds.features.Scalar(dtype=np.int32),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: the data ships with scikit-learn.
        c = self.builder_config
        splits = digits_split_indices(c.num_test, c.data_seed)
        return {name: self._generate_examples(indices) for name, indices in splits.items()}

    def _generate_examples(self, indices: np.ndarray):
        from sklearn.datasets import load_digits  # Only building needs scikit-learn.

        digits = load_digits()
        images = digits.images.astype(np.uint8)[..., None]  # float 0..16 -> uint8 (8, 8, 1)
        for i in indices:
            yield int(i), {"image": images[i], "label": int(digits.target[i]), "id": int(i)}
