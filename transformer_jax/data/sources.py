"""Random-access reading of prepared TFDS splits through `tfds.data_source` (array_record)."""

from collections.abc import Sequence
from typing import Any

import tensorflow_datasets as tfds

from transformer_jax.data.checks import utf8_text


def open_split(name: str, split: str, data_dir: str) -> Sequence[dict[str, Any]]:
    """The split as a random-access sequence of example dicts (numpy values).

    Raises a ValueError with the fix when the dataset is not prepared as array_record under
    `data_dir` (TFDS reports that case as NotImplementedError about the file format).
    """
    try:
        return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    except NotImplementedError as err:
        raise ValueError(
            f"data.name={name!r} is not prepared in array_record format under "
            f"data.data_dir={data_dir!r}. Prepare it once (needs network), e.g. "
            f"`tfds build {name} --data_dir={data_dir} --file_format=array_record`, "
            f"or point data.data_dir at a directory holding it."
        ) from err


def as_text(value: Any, what: str = "a text value of the prepared dataset") -> str:
    """A TFDS Text feature value (bytes from array_record, str from tfds mock data) as str; bytes
    that are not UTF-8 are a ValueError naming `what` and the first bad byte."""
    if isinstance(value, bytes):
        return utf8_text(value, what, "UTF-8 text; prepare the dataset again from UTF-8 files")
    return str(value)


def concatenated_text(source: Sequence[dict[str, Any]], key: str = "text") -> str:
    """Concatenation of the `key` text of every example, in index order."""
    return "".join(as_text(source[i][key]) for i in range(len(source)))
