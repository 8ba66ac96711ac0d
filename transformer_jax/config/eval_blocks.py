"""`train.evaluators`: one configured block per evaluator, big_vision's `config.evals` layout.

`train.evaluators` maps an evaluator's registered name (train/evaluators.py) to its block, and
the evaluators run in the mapping's order. Every block has the common keys below; the rest of
a block are the evaluator's own options, declared (with their defaults) by its registry entry:

  every   steps between its evaluations (and at the run's end); None = train.eval_every
  splits  the evaluation splits it measures, a tuple of names; () = the evaluator's default
  prefix  put before each metric name it logs ("" = none): "greedy_" logs greedy_loss

The default blocks are the evaluators every run had before blocks existed, with their options
at the values of the train fields they replace, so a config that sets none of them trains and
evaluates as it did. Those train fields (`LEGACY_FIELDS`) are read from a config file or a run's
config.json into their blocks (`upgrade_train_fields`); the command line names the new field.
"""

import copy
from collections.abc import Mapping
from typing import Any

from transformer_jax import fields as F

COMMON_KEYS: dict[str, Any] = {"every": None, "splits": (), "prefix": ""}

# Each block as TrainConfig() holds it: the one source of these defaults. "generation" and
# "bleu" apply to some runs only (seq2seq data; text references): `enabled` switches them.
DEFAULT_EVALUATORS: dict[str, dict[str, Any]] = {
    # loss, token and sequence accuracy of every split, the model reading the reference
    "teacher_forced": {**COMMON_KEYS},
    # seq2seq only: gen_seq_accuracy, greedy decoding scored by exact match. Decoding a long
    # split costs more than training between evaluations: set `splits` to the ones you report.
    "generation": {**COMMON_KEYS, "enabled": True},
    # Translation data only (text references): sacreBLEU of decoded text (train/bleu_eval.py).
    # Every evaluation decodes `splits` (() = validation) greedily, at most `examples` examples
    # each (0 = all); the last one also decodes the test split by beam search (`beam_size`
    # hypotheses, GNMT length penalty `beam_alpha`; the paper: 4 and 0.6) and greedily, and
    # writes the translations to the run directory.
    "bleu": {**COMMON_KEYS, "enabled": False, "examples": 0, "beam_size": 4, "beam_alpha": 0.6},
    # Decoder-only language models on text streams (train/length_eval.py): loss by position on
    # consecutive windows `factor` x data.seq_len long, at most `windows` per split (0 = all),
    # in buckets of `bucket` positions and the bands (L, 2L], (2L, 4L], ... Off by default.
    "length_extrapolation": {
        **COMMON_KEYS,
        "enabled": False,
        "factor": 8,
        "windows": 64,
        "bucket": 16,
    },
}

# The train fields the blocks replaced: old name -> (evaluator, option).
LEGACY_FIELDS: dict[str, tuple[str, str]] = {
    "generate_eval": ("generation", "enabled"),
    "generate_eval_splits": ("generation", "splits"),
    "bleu": ("bleu", "enabled"),
    "bleu_eval_examples": ("bleu", "examples"),
    "beam_size": ("bleu", "beam_size"),
    "beam_alpha": ("bleu", "beam_alpha"),
}


def default_evaluators() -> dict[str, dict[str, Any]]:
    return copy.deepcopy(DEFAULT_EVALUATORS)


def moved_field(name: str) -> str | None:
    """The block option that replaced train field `name`, dotted; None if it did not move."""
    if name not in LEGACY_FIELDS:
        return None
    evaluator, option = LEGACY_FIELDS[name]
    return f"train.evaluators.{evaluator}.{option}"


def upgrade_train_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Train fields written before evaluator blocks -> blocks (unchanged when already blocks):
    a tuple of names becomes their default blocks, and each LEGACY_FIELDS value moves into its
    evaluator's block (dropped, as it was ignored, when the evaluator is not listed)."""
    fields = dict(fields)
    names = fields.get("evaluators")
    if isinstance(names, (tuple, list)) and all(isinstance(n, str) for n in names):
        fields["evaluators"] = {n: copy.deepcopy(DEFAULT_EVALUATORS.get(n, {})) for n in names}
    legacy = {name: fields.pop(name) for name in LEGACY_FIELDS if name in fields}
    blocks = fields.get("evaluators", default_evaluators())
    if legacy and isinstance(blocks, Mapping):
        blocks = {name: dict(block) for name, block in blocks.items()}
        for name, value in legacy.items():
            evaluator, option = LEGACY_FIELDS[name]
            if isinstance(blocks.get(evaluator), dict):
                _check_agree(name, value, evaluator, option, blocks[evaluator])
                blocks[evaluator][option] = value
        fields["evaluators"] = blocks
    return fields


def _check_agree(name: str, value, evaluator: str, option: str, block: dict) -> None:
    """A ValueError when a block option set away from its default (the command line can set
    only the block) disagrees with the old train field a config file still sets: neither may
    silently win."""
    default = DEFAULT_EVALUATORS.get(evaluator, {}).get(option)
    current = block.get(option, default)

    def same(a, b) -> bool:
        return list(a) == list(b) if isinstance(a, (tuple, list)) else a == b

    if not same(current, default) and not same(current, value):
        raise ValueError(
            f"train.{name}={value!r} (the old name of train.evaluators.{evaluator}.{option}) "
            f"disagrees with train.evaluators.{evaluator}.{option}={current!r}; set only the latter"
        )


def check_blocks(blocks, eval_every: int) -> dict[str, dict[str, Any]]:
    """`train.evaluators` as plain dicts, its common keys checked and filled in (`every` made
    an int: train.eval_every when None); ValueErrors name the field, the value and what is
    valid. The evaluators' names and own options are checked against the registry
    (train/evaluators.py `check_blocks`)."""
    if not isinstance(blocks, Mapping) or not all(
        isinstance(name, str) and isinstance(block, Mapping) for name, block in blocks.items()
    ):
        raise ValueError(
            f"train.evaluators={blocks!r} must map evaluator names to their blocks, e.g. "
            "{'teacher_forced': {'every': 500}}"
        )
    checked = {}
    for name, block in blocks.items():
        block = {**COMMON_KEYS, **block}
        field = f"train.evaluators.{name}"
        if block["every"] is None:
            block["every"] = eval_every
        else:
            F.check_int(f"{field}.every", block["every"], 1)
        splits = block["splits"]
        if not isinstance(splits, (tuple, list)) or not all(isinstance(s, str) for s in splits):
            raise ValueError(
                f"{field}.splits={splits!r} must be a tuple of evaluation split names, e.g. "
                "('test',), or () for the evaluator's default"
            )
        block["splits"] = tuple(splits)
        if not isinstance(block["prefix"], str):
            raise ValueError(f"{field}.prefix={block['prefix']!r} must be a string ('' = none)")
        checked[name] = block
    return checked
