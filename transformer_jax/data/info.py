"""Dataset description shared by every dataset: what the trainer needs to build a model.

Token conventions (contract): PAD = 0, BOS = 1, EOS = 2; real tokens start at 3.
"""

import dataclasses
from collections.abc import Sequence
from typing import Literal, Protocol

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
NUM_SPECIAL_IDS = 3

Kind = Literal["seq2seq", "lm", "classification"]


class Tokenizer(Protocol):
    """Maps text to token ids and back; ids follow the PAD/BOS/EOS convention above. `source`
    names what it was built from (a corpus file, a model file), for error messages."""

    source: str

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

    def padded_lengths(self, split: str) -> tuple[int, int]:
        """(inputs, targets) padded lengths of the batches of `split`."""
        return self.split_lengths.get(split, (self.max_input_len, self.max_target_len))
