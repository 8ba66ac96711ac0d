"""Multi30k task 1 (Elliott et al. 2016) as a TFDS builder: English-German image captions.

Splits train / validation / test hold 29,000 / 1,014 / 1,000 sentence pairs (test is
test_2016_flickr), in file order: line i of the German file is the translation of line i of the
English one. The raw `.gz` files are downloaded from the multi30k/dataset GitHub repository
(their sizes and SHA-256 are pinned in `URL_INFOS`, so TFDS verifies them), or read offline from
a manual directory holding the six files (`data.manual_dir`). Written as array_record, read
with `tfds.data_source`, no TensorFlow.

The builder configs are the two directions, "de-en" (default) and "en-de": the stored examples
are the same {"de": text, "en": text} pairs, the config sets the supervised keys. Raw files other
than the pinned ones (a test fixture, an edited copy) get a config name ending in a hash of
their content, so they never share a cache directory with the real data.
"""

import dataclasses
import gzip
import hashlib
import zlib
from pathlib import Path

import tensorflow_datasets as tfds

from transformer_jax.data.checks import utf8_text

LANGUAGES = ("de", "en")
# TFDS split -> file name stem in data/task1/raw/ of the multi30k/dataset repository.
SPLIT_FILES = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
FILES = tuple(f"{stem}.{lang}.gz" for stem in SPLIT_FILES.values() for lang in LANGUAGES)
URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"

# (bytes, SHA-256) of the raw files at commit a3d2e0d26b56f3846f66a952536ffed4e401d05a.
_PINNED = {
    "train.de.gz": (637044, "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"),
    "train.en.gz": (568929, "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"),
    "val.de.gz": (24681, "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
    "val.en.gz": (21650, "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
    "test_2016_flickr.de.gz": (
        22890,
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    ),
    "test_2016_flickr.en.gz": (
        21077,
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    ),
}
PINNED_SHA256 = {name: sha for name, (_, sha) in _PINNED.items()}
URL_INFOS = {
    URL + name: tfds.core.download.checksums.UrlInfo(size=size, checksum=sha, filename=name)
    for name, (size, sha) in _PINNED.items()
}


def file_sha256(paths: dict) -> dict[str, str]:
    """File name -> SHA-256 of its bytes, for {file name: path}."""
    return {name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for name, p in paths.items()}


def content_id(sha256: dict[str, str]) -> str:
    """ "" for the pinned files, else 12 hex digits identifying the six files' content."""
    if sha256 == PINNED_SHA256:
        return ""
    return hashlib.sha256("".join(sha256[name] for name in FILES).encode()).hexdigest()[:12]


@dataclasses.dataclass
class Multi30kConfig(tfds.core.BuilderConfig):
    """One direction; `sha256` the expected content of the raw files (default: the pinned)."""

    source_language: str = "de"
    target_language: str = "en"
    sha256: dict[str, str] = dataclasses.field(default_factory=lambda: dict(PINNED_SHA256))


class Multi30k(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Multi30k task 1, raw (cased, untokenized) text; examples {"de": str, "en": str}."""

    name = "multi30k"
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version: task 1, train / validation / test_2016_flickr."}
    BUILDER_CONFIGS = [
        Multi30kConfig(name="de-en", source_language="de", target_language="en"),
        Multi30kConfig(name="en-de", source_language="en", target_language="de"),
    ]
    DEFAULT_CONFIG_NAME = "de-en"
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Put the six files {', '.join(FILES)} of {URL} in the manual directory (data.manual_dir)."
    )

    @tfds.core.utils.classproperty
    @classmethod
    def url_infos(cls) -> dict:
        return URL_INFOS

    def _info(self) -> tfds.core.DatasetInfo:
        c = self.builder_config
        return tfds.core.DatasetInfo(
            builder=self,
            description="Multi30k task 1: Flickr30K image captions and their translations.",
            features=tfds.features.Translation(languages=LANGUAGES),
            supervised_keys=(c.source_language, c.target_language),
            homepage="https://github.com/multi30k/dataset",
            citation="Elliott et al. 2016, Multi30K: Multilingual English-German Image "
            "Descriptions. Non-commercial research and educational use.",
            # Keep file order: line i of the test split is line i of translations/test.txt.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        try:  # TFDS raises AssertionError when the manual directory is absent or empty.
            manual = dl_manager.manual_dir
            paths = {name: manual / name for name in FILES}
        except AssertionError:
            paths = dl_manager.download({name: URL + name for name in FILES})
        actual = file_sha256(paths)
        if actual != self.builder_config.sha256:
            changed = sorted(n for n in FILES if actual[n] != self.builder_config.sha256[n])
            raise ValueError(
                f"Multi30k files {changed} do not have the content this config "
                f"({self.builder_config.name!r}) was made for; rebuild the config from them"
            )
        return {
            split: self._generate_examples(*(paths[f"{stem}.{lang}.gz"] for lang in LANGUAGES))
            for split, stem in SPLIT_FILES.items()
        }

    def _generate_examples(self, de_path, en_path):
        de, en = read_lines(de_path), read_lines(en_path)
        if len(de) != len(en):
            raise ValueError(f"{de_path} has {len(de)} lines but {en_path} has {len(en)}")
        for i, (de_line, en_line) in enumerate(zip(de, en, strict=True)):
            yield i, {"de": de_line, "en": en_line}


def make_builder(
    source_language: str, target_language: str, *, data_dir: str, manual_dir: str = ""
) -> Multi30k:
    """The builder of a direction, for the pinned files or for those in `manual_dir`.

    Its config is "de-en" / "en-de", plus "-<content id>" for files that are not the pinned ones.
    """
    if manual_dir:
        sha256 = file_sha256({name: Path(manual_dir) / name for name in FILES})
    else:
        sha256 = dict(PINNED_SHA256)
    name = f"{source_language}-{target_language}"
    suffix = content_id(sha256)
    config = name
    if suffix:
        config = Multi30kConfig(
            name=f"{name}-{suffix}",
            source_language=source_language,
            target_language=target_language,
            sha256=sha256,
        )
    return Multi30k(config=config, data_dir=data_dir, file_format="array_record")


def read_lines(path) -> list[str]:
    """The lines of a gzipped UTF-8 text file, without their line endings; a ValueError naming
    the file when it is cut short or not gzip, or naming its first byte that is not UTF-8."""
    try:
        with gzip.open(path, "rb") as f:
            content = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise ValueError(
            f"Multi30k file {path} is damaged ({type(error).__name__}: {error}); download it "
            f"again from {URL} or put a good copy in data.manual_dir"
        ) from None
    # The offset counts bytes of the uncompressed text (`zcat FILE | head -c OFFSET`).
    valid = f"UTF-8 text, as the published files are (re-encode it, or download it from {URL})"
    return utf8_text(content, f"Multi30k file {path}, uncompressed,", valid).splitlines()
