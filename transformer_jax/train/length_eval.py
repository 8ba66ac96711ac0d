"""Train short, test long: a language model's loss by position on windows longer than its
training windows (the `length_extrapolation` evaluator of train/evaluators.py).

A character LM trained on windows of L = data.seq_len characters reads consecutive windows of
`factor` x L characters of each evaluation split (data.Dataset.windows), from their start, and
its next-character loss is averaged per position t = 1 .. factor x L over the windows. Press et
al. 2022 ("Train Short, Test Long", Figure 1) and Kazemnejad et al. 2023 (NoPE) measure
extrapolation this way, as loss or perplexity against the input length (docs/papers.md). Metrics,
per split (t 1-based):
  loss_pos_{a}_{b}    mean loss at positions a .. b, buckets of `bucket` positions
  loss_band_1x        positions (0, L], the training length
  loss_band_{k}x      positions (k/2 L, k L], k = 2, 4, .., factor
  loss_window_{k}x    positions (0, k L]: a causal model's first k L positions do not see the
                      rest of the window, so this is the loss of windows k L long read from
                      their start, Press et al.'s perplexity at input length k L (as a log)

Longer inputs need no retraining where nothing about the model is sized by the length: the
causal mask, the ALiBi bias and the rotary angles are built from each forward pass's positions
(models/stack.py, layers/positional.py). The sinusoidal table is computed to
model.positional.max_len, so the evaluation model computes it to the window length when that is
longer (the same rows below max_len: the table has no parameters). A learned table has rows up
to max_len only (rows past the training length keep their initialisation): windows longer than
max_len are refused, nothing is invented past the table.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import ShapeDtypeStruct

from transformer_jax import fields as F
from transformer_jax.data.abstract import abstract_batch
from transformer_jax.models import build_model
from transformer_jax.train import step as steps

NAME = "length_extrapolation"
FIELD = f"train.evaluators.{NAME}"


def check(field: str, block: dict) -> None:
    """The block's own options: enabled a bool, factor a power of two >= 2, windows >= 0,
    bucket >= 1."""
    F.check_bool(f"{field}.enabled", block["enabled"])
    factor = block["factor"]
    F.check_int(f"{field}.factor", factor, 2)
    if factor & (factor - 1):
        raise ValueError(
            f"{field}.factor={factor} must be a power of two (its bands double: (L, 2L], "
            f"(2L, 4L], ...); valid: 2, 4, 8, 16, ..."
        )
    F.check_int(f"{field}.windows", block["windows"], 0)
    F.check_int(f"{field}.bucket", block["bucket"], 1)


def enabled(prepared) -> bool:
    block = prepared.train_cfg.evaluators.get(NAME)
    return block is not None and block["enabled"]


def window_length(prepared, block) -> tuple[int, int]:
    """(L, window length) for a run this evaluation can read; a ValueError naming the field
    otherwise."""
    info, cfg = prepared.info, prepared.model_config
    if info.kind != "lm" or cfg.family != "decoder_only":
        raise ValueError(
            f"{FIELD}.enabled=True reads a decoder-only language model, not {cfg.family} on "
            f"{info.kind} data ({info.name}); valid: enabled=False for this run"
        )
    if cfg.positional.eval_positions != "plain":
        raise ValueError(
            f"{FIELD}.enabled=True reads positions 0, 1, 2, ..., but "
            f"model.positional.eval_positions={cfg.positional.eval_positions!r}; valid: 'plain'"
        )
    train_len = info.max_target_len
    if train_len % block["bucket"]:
        raise ValueError(
            f"{FIELD}.bucket={block['bucket']} must divide the training length "
            f"data.seq_len={train_len} (buckets would straddle it); valid: a divisor of {train_len}"
        )
    return train_len, block["factor"] * train_len


def _param_shapes(model, length: int):
    ids = ShapeDtypeStruct((1, length), jnp.int32)
    shapes = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), ids)
    return jax.tree.map(lambda leaf: (leaf.shape, leaf.dtype), shapes)


def eval_model(prepared, length: int, factor: int):
    """The run's model, reading windows of `length` tokens: with a computed table (sinusoidal)
    grown to `length`, refused (ValueError naming model.positional.max_len) where growing it
    would change the parameters (a learned table)."""
    cfg = prepared.model_config
    pos = cfg.positional
    if length <= pos.max_len:
        return prepared.model
    longer = build_model(cfg.override({"positional.max_len": length}))
    train_len = length // factor
    if _param_shapes(longer, train_len) != _param_shapes(prepared.model, train_len):
        raise ValueError(
            f"{FIELD}.factor={factor} reads windows of {length} positions, but "
            f"model.positional.max_len={pos.max_len} and {pos.kind!r} positions are a "
            f"parameter table of {pos.max_len} rows: it has no entries past them to evaluate; "
            f"valid: factor <= {pos.max_len // train_len}, or a kind computed at every position "
            "(sinusoidal, rotary, alibi, none)"
        )
    return longer


def long_batch(prepared, length: int) -> dict:
    """ShapeDtypeStructs of a batch of long windows (transformer_jax.aot compiles from them)."""
    return abstract_batch(
        prepared.info, prepared.resolved["data"], prepared.batch_size, (0, length)
    )


def position_step(model):
    """(state, batch) -> {"loss": (sum over rows of the loss at each position (T,), the weight
    at each position (T,))}, the model reading plain positions."""

    def position_sums(state, batch):
        logits_BTV, targets_BT, weights_BT, _ = steps.forward(
            model, state.variables, batch, train=False
        )
        nll_BT = optax.softmax_cross_entropy_with_integer_labels(
            logits_BTV.astype(jnp.float32), targets_BT
        )
        return {"loss": ((nll_BT * weights_BT).sum(0), weights_BT.sum(0))}

    return position_sums


def position_metrics(loss_T: np.ndarray, weight_T: np.ndarray, train_len: int, bucket: int):
    """The metrics of the module docstring from per-position loss and weight sums (T,)."""
    total = len(loss_T)

    def mean(lo: int, hi: int) -> float:  # positions lo+1 .. hi, 1-based
        weight = weight_T[lo:hi].sum()
        return float(loss_T[lo:hi].sum() / weight) if weight > 0 else float("nan")

    width = len(str(total))
    found = {
        f"loss_pos_{lo + 1:0{width}d}_{min(lo + bucket, total):0{width}d}": mean(lo, lo + bucket)
        for lo in range(0, total, bucket)
    }
    found["loss_band_1x"] = mean(0, train_len)
    k = 2
    while k * train_len <= total:
        found[f"loss_band_{k}x"] = mean(k // 2 * train_len, k * train_len)
        k *= 2
    k = 1
    while k * train_len <= total:
        found[f"loss_window_{k}x"] = mean(0, k * train_len)
        k *= 2
    return found


class LengthExtrapolation:
    """Loss by position on windows `factor` x the training length (module docstring)."""

    name = NAME
    at_end = False

    def __init__(self, step_fn, eval_sets: dict, train_len: int, bucket: int):
        self._step_fn = step_fn  # (placed state, host batch) -> per-position sums
        self._eval_sets = eval_sets  # split -> batches of long windows
        self._train_len = train_len
        self._bucket = bucket

    def evaluate(self, state, results, *, final: bool) -> None:
        for split, batches in self._eval_sets.items():
            loss_T = weight_T = 0.0
            for batch in batches:
                loss, weight = jax.device_get(self._step_fn(state, batch))["loss"]
                loss_T, weight_T = loss_T + np.asarray(loss, np.float64), weight_T + weight
            metrics = position_metrics(loss_T, np.asarray(weight_T), self._train_len, self._bucket)
            results.setdefault(split, {}).update(metrics)

    def summary_fields(self) -> dict[str, Any]:
        return {"train_len": self._train_len, "bucket": self._bucket}


def build(context) -> LengthExtrapolation | None:
    prepared, block = context.prepared, context.block
    if not block["enabled"]:
        return None
    train_len, length = window_length(prepared, block)
    model = eval_model(prepared, length, block["factor"])
    splits = context.splits(prepared.info.eval_splits)
    eval_sets = {
        split: prepared.dataset.windows(
            split,
            length=length,
            batch_size=context.batch_size,
            max_examples=block["windows"] or None,
        )
        for split in splits
    }
    step = position_step(model)
    if context.group is not None:  # One vmapped program for the group's stacked states.
        step_fn = context.group.lane_fn(NAME, step, context.lane)
    else:
        step_fn = context.shared_fn(NAME, lambda: context.parallel.wrap_eval(jax.jit(step)))
    return LengthExtrapolation(step_fn, eval_sets, train_len, block["bucket"])
