"""Dataset description shared by every dataset: what the trainer needs to build a model.

Special token ids belong to a tokenizer: each declares its `pad_id`, `bos_id` and `eos_id`
(None: it has none), and a DatasetInfo declares its dataset's. The project's own tokenizers
(tokenizers.py: characters, symbols, SentencePiece) share one convention, declared here once:
PAD = 0, BOS = 1, EOS = 2, real tokens from 3. Code that reads or writes ids takes them from a
tokenizer, a DatasetInfo or `model.tokens`, never from these names.
"""

import dataclasses
from collections.abc import Sequence
from typing import Literal, Protocol

# The convention of the project's own tokenizers (and the DatasetInfo default).
PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
NUM_SPECIAL_IDS = 3  # their first real token

Kind = Literal["seq2seq", "lm", "classification"]


class Tokenizer(Protocol):
    """Maps text to token ids and back. `source` names what it was built from (a corpus file, a
    model file), for error messages; `pad_id`, `bos_id`, `eos_id` are its special ids, None
    where it has none (a GPT-2 tokenizer has no PAD)."""

    source: str
    pad_id: int | None
    bos_id: int | None
    eos_id: int | None

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Static facts about a prepared dataset.

    Attributes:
      name: dataset name as in `config.data.name`.
      kind: "seq2seq" (inputs -> targets), "lm" (targets only) or "classification".
      vocab_size: number of token ids, including the 3 special ids.
      max_input_len: padded length of "inputs" (0 for lm), in the split with the longest.
      max_target_len: padded length of "targets" including the EOS slot (lm: seq_len), ditto.
      split_lengths: (inputs, targets) padded lengths of the splits padded shorter than the
        max lengths, by split name: algorithmic tasks pad train and test to the longest
        in-distribution sequence, only test_long to the longest of all (half the compute on
        copy, whose test_long sequences are twice as long).
      eval_splits: splits that `Dataset.eval_batches` accepts besides "train".
      tokenizer: object with encode(str) -> list[int] and decode(list[int]) -> str; None for
        images.
      num_classes: number of labels for classification, else 0.
      image_shape: (height, width, channels) of the "inputs" images of an image classification
        dataset (after any resizing), else None.
      train_lengths_vary: whether training batches are padded to their own lengths (length
        buckets), so that two seeds' batches of one step may differ in shape: a seed or run
        group, which stacks them, cannot train it.
      pad_id, bos_id, eos_id: the special ids of the dataset's tokens (None: it has none); its
        tokenizer's where it has one (`special_ids(tokenizer)`), checked against them.
    """

    name: str
    kind: Kind
    vocab_size: int
    max_input_len: int
    max_target_len: int
    eval_splits: tuple[str, ...]
    tokenizer: Tokenizer | None
    num_classes: int = 0
    image_shape: tuple[int, int, int] | None = None
    split_lengths: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    train_lengths_vary: bool = False
    pad_id: int | None = PAD_ID
    bos_id: int | None = BOS_ID
    eos_id: int | None = EOS_ID

    def __post_init__(self):
        if self.tokenizer is None:
            return
        for name, value in special_ids(self.tokenizer).items():
            if getattr(self, name) != value:
                raise ValueError(
                    f"DatasetInfo {self.name!r} has {name}={getattr(self, name)}, but its "
                    f"tokenizer ({self.tokenizer.source}) declares {name}={value}; valid: "
                    "the tokenizer's ids (`special_ids(tokenizer)`)"
                )

    def padded_lengths(self, split: str) -> tuple[int, int]:
        """(inputs, targets) padded lengths of the batches of `split`."""
        return self.split_lengths.get(split, (self.max_input_len, self.max_target_len))


def special_ids(tokenizer: Tokenizer) -> dict[str, int | None]:
    """{"pad_id", "bos_id", "eos_id"} of `tokenizer`, as DatasetInfo takes them."""
    return {name: getattr(tokenizer, name) for name in ("pad_id", "bos_id", "eos_id")}
