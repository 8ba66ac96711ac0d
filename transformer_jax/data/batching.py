"""Fixed-shape rows and batches (contract): PAD after the tokens, EOS after targets,
example_weights, and optionally "targets_weights" (per-token loss weights, e.g. only a prompt's
answer). PAD and EOS are the dataset's tokenizer's (`pad_id`, `eos_id`), which every caller
passes: nothing here assumes an id.

A ragged last eval batch is completed with all-zero rows of weight 0, so every batch has the
same shapes and a jitted eval step compiles once (a weight-0 row is never scored or decoded, so
its zeros stand for no id).
"""

from collections.abc import Iterable, Sequence

import numpy as np

Row = dict[str, np.ndarray]
Batch = dict[str, np.ndarray]


def pad(ids: Sequence[int] | np.ndarray, length: int, pad_id: int | None) -> np.ndarray:
    """int32 [length]: `ids` then `pad_id`. Callers guarantee len(ids) <= length; a row that
    needs padding needs a PAD id (`pad_id=None`: the tokenizer has none)."""
    if len(ids) < length and pad_id is None:
        raise ValueError(
            f"a row of {len(ids)} tokens padded to {length} needs a PAD id, and the tokenizer "
            "has none (pad_id=None); valid: a tokenizer with a PAD id, or rows that need none"
        )
    out = np.full(length, 0 if pad_id is None else pad_id, dtype=np.int32)
    out[: len(ids)] = ids
    return out


def with_eos(ids: Sequence[int] | np.ndarray, eos_id: int | None) -> np.ndarray:
    """int32: `ids` then EOS; a dataset that ends its rows with EOS needs one."""
    if eos_id is None:
        raise ValueError(
            "rows end with EOS, and the tokenizer has none (eos_id=None); valid: a tokenizer "
            "with an EOS id"
        )
    return np.append(np.asarray(ids, dtype=np.int32), np.int32(eos_id))


def seq2seq_row(
    inputs,
    targets,
    max_input_len: int,
    max_target_len: int,
    *,
    pad_id: int | None,
    eos_id: int | None,
) -> Row:
    """{"inputs": [max_input_len], "targets": [max_target_len]}; targets get EOS appended,
    both are padded with PAD."""
    return {
        "inputs": pad(inputs, max_input_len, pad_id),
        "targets": pad(with_eos(targets, eos_id), max_target_len, pad_id),
    }


def prompt_row(
    inputs, targets, separator: int, length: int, *, pad_id: int | None, eos_id: int | None
) -> Row:
    """A seq2seq example as one decoder-only row: "targets" [length] = inputs, separator,
    targets, EOS; "targets_weights" float32 [length] = 1 on the answer and its EOS only, so the
    loss and the accuracies score the answer given the prompt, as an encoder-decoder's do."""
    prompt = len(inputs) + 1
    weights = np.zeros(length, dtype=np.float32)
    weights[prompt : prompt + len(targets) + 1] = 1.0
    ids = np.concatenate([np.asarray(inputs, np.int32), [separator], with_eos(targets, eos_id)])
    return {"targets": pad(ids, length, pad_id), "targets_weights": weights}


def stack(rows: Sequence[Row], batch_size: int | None = None) -> Batch:
    """Stacks rows into a batch [B, ...] with float32 example_weights [B].

    With `batch_size` > len(rows), zero rows of weight 0 fill the batch up to `batch_size`.
    """
    size = len(rows) if batch_size is None else batch_size
    batch = {}
    for key in rows[0]:
        values = np.stack([r[key] for r in rows])
        filler = np.zeros((size - len(rows),) + values.shape[1:], dtype=values.dtype)
        batch[key] = np.concatenate([values, filler])
    weights = np.zeros(size, dtype=np.float32)
    weights[: len(rows)] = 1.0
    batch["example_weights"] = weights
    return batch


def add_example_weights(batch: Batch) -> Batch:
    """Marks every row of a full (training) batch as a real example."""
    size = len(next(iter(batch.values())))
    return {**batch, "example_weights": np.ones(size, dtype=np.float32)}


def rows_to_batches(rows: Iterable[Row], batch_size: int) -> list[Batch]:
    """All rows in order, `batch_size` per batch; the last batch is filled with weight-0 rows."""
    batches, pending = [], []
    for row in rows:
        pending.append(row)
        if len(pending) == batch_size:
            batches.append(stack(pending))
            pending = []
    if pending:
        batches.append(stack(pending, batch_size))
    return batches
