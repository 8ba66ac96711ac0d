"""The special token ids a model is built and trained with (model.tokens).

A floor below the config and the model families: both read it, and it reads neither.
"""

import dataclasses
from typing import ClassVar

from transformer_jax import fields as F


@dataclasses.dataclass(frozen=True)
class TokenConfig:
    """The special token ids of the model's tokenizer; -1: the tokenizer has none (GPT-2 has no
    PAD, and its one special token is both BOS and EOS). The defaults are the datasets' own
    convention (transformer_jax.data.info), which every run written before this field had.

    Padding is masked by the model's `valid` mask: where a caller passes none, by `pad_id`
    (no padding at all without one). Decoding prepends BOS only where there is one and stops
    at EOS only where there is one; neither PAD nor BOS is ever chosen as an output."""

    PREFIX: ClassVar[str] = "model.tokens"

    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self):
        for name in ("pad_id", "bos_id", "eos_id"):
            F.check_int(f"{self.PREFIX}.{name}", getattr(self, name), -1)
        if self.pad_id != -1 and self.pad_id in (self.bos_id, self.eos_id):
            raise ValueError(
                f"{self.PREFIX}.pad_id={self.pad_id} is also BOS or EOS: padding would hide "
                "real tokens; valid: an id of its own, or -1 (no padding id)"
            )

    @property
    def pad(self) -> int | None:
        return None if self.pad_id == -1 else self.pad_id

    @property
    def bos(self) -> int | None:
        return None if self.bos_id == -1 else self.bos_id

    @property
    def eos(self) -> int | None:
        return None if self.eos_id == -1 else self.eos_id

    def valid(self, ids):
        """The tokens that are not padding: ids != pad_id, or all of them without a pad id."""
        return ids == ids if self.pad is None else ids != self.pad


# The datasets' convention (PAD 0, BOS 1, EOS 2): the default of callers that pass no model's.
DATASET_TOKENS = TokenConfig()
