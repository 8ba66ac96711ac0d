"""Pure, jittable training and evaluation steps: `(state, batch) -> (state, metrics)`.

Metrics leave the device as sums and counts; the host divides (as the flax examples do), so
averages over many batches are exact whatever the padding.
"""

from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax

from transformer_jax.config import CLASSIFIERS
from transformer_jax.train import losses
from transformer_jax.train.numerics import tree_norm

BOS = 1


@flax.struct.dataclass
class TrainState:
    step: jnp.ndarray  # int32 scalar: updates applied so far.
    params: Any
    batch_stats: Any  # BatchNorm running averages; {} for the other norms.
    opt_state: Any
    rng: jnp.ndarray  # Base key; step k uses fold_in(rng, k), so resuming replays exactly.


def shift_right(targets_BT, segment_ids_BT=None):
    """Teacher forcing: the decoder reads BOS, y_1, ..., y_{T-1} (NTHU slides 55-56).

    With packed documents each document starts again from BOS.
    """
    shifted_BT = jnp.pad(targets_BT, ((0, 0), (1, 0)), constant_values=BOS)[:, :-1]
    if segment_ids_BT is not None:
        starts_BT = jnp.pad(segment_ids_BT, ((0, 0), (1, 0)))[:, :-1] != segment_ids_BT
        shifted_BT = jnp.where(starts_BT & (segment_ids_BT > 0), BOS, shifted_BT)
    # Keep padding as padding: positions after the sequence ends read 0, not the last token.
    return jnp.where(targets_BT == 0, jnp.where(shifted_BT == BOS, BOS, 0), shifted_BT)


def model_inputs(family: str, batch):
    """The positional and keyword arguments of the model family's __call__ for a batch."""
    if family in CLASSIFIERS:
        return (batch["inputs"],), {}
    segments_BT = batch.get("targets_segment_ids")
    decoder_inputs_BT = shift_right(batch["targets"], segments_BT)
    if family == "encoder_decoder":
        return (batch["inputs"], decoder_inputs_BT), {}
    return (decoder_inputs_BT,), {
        "segment_ids_BT": segments_BT,
        "positions_BT": batch.get("targets_positions"),
    }


def forward(model, variables, batch, *, train: bool, rngs=None, mutable=False):
    """Runs the model on a batch; returns (logits, targets, loss weights, mutated collections)."""
    family = model.config.family
    args, kwargs = model_inputs(family, batch)
    out = model.apply(variables, *args, train=train, rngs=rngs, mutable=mutable, **kwargs)
    logits, collections = out if mutable else (out, {})
    if family in CLASSIFIERS:
        return logits, batch["label"], batch["example_weights"], collections
    targets_BT = batch["targets"]
    weights_BT = losses.weights_from_targets(targets_BT) * batch["example_weights"][:, None]
    return logits, targets_BT, weights_BT, collections


def _variables(state: TrainState, params=None):
    variables = {"params": state.params if params is None else params}
    if state.batch_stats:
        variables["batch_stats"] = state.batch_stats
    return variables


def train_step(state: TrainState, batch, *, model, optimizer, label_smoothing: float):
    """One optimizer update on `batch`. Dropout keys come from fold_in(rng, step)."""
    dropout_rng = jax.random.fold_in(state.rng, state.step)
    mutable = ["batch_stats"] if state.batch_stats else False

    def loss_fn(params):
        logits, targets, weights, new_state = forward(
            model,
            _variables(state, params),
            batch,
            train=True,
            rngs={"dropout": dropout_rng},
            mutable=mutable,
        )
        loss_sum, weight_sum = losses.cross_entropy(logits, targets, weights, label_smoothing)
        return loss_sum / jnp.maximum(weight_sum, 1.0), (logits, targets, weights, new_state)

    (loss, (logits, targets, weights, new_state)), grads = jax.value_and_grad(
        loss_fn, has_aux=True
    )(state.params)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    correct, count = losses.token_accuracy(logits, targets, weights)
    metrics = {
        "loss": loss,
        accuracy_name(model.config.family): correct / jnp.maximum(count, 1.0),
        "tokens": count,
        "grad_norm": tree_norm(grads),
        "param_norm": tree_norm(params),
        "update_norm": tree_norm(updates),
    }
    new_state = state.replace(
        step=state.step + 1,
        params=params,
        opt_state=opt_state,
        batch_stats=new_state.get("batch_stats", state.batch_stats),
    )
    return new_state, metrics


def eval_step(state: TrainState, batch, *, model, diagnostics: bool):
    """Sums for loss, accuracy (per token, or per example for classifiers) and sequence exact
    match; attention diagnostics as means."""
    logits, targets, weights, collected = forward(
        model,
        _variables(state),
        batch,
        train=False,
        mutable=["diagnostics"] if diagnostics else False,
    )
    loss_sum, weight_sum = losses.cross_entropy(logits, targets, weights, 0.0)
    correct, count = losses.token_accuracy(logits, targets, weights)
    family = model.config.family
    sums = {"loss": (loss_sum, weight_sum), accuracy_name(family): (correct, count)}
    if family not in CLASSIFIERS:
        sums["seq_accuracy"] = losses.sequence_accuracy(
            logits, targets, batch["example_weights"], weights
        )
    for name, value in flatten_diagnostics(collected.get("diagnostics", {})).items():
        sums[name] = (value, jnp.float32(1.0))
    return sums


def accuracy_name(family: str) -> str:
    """The accuracy metric's name: "accuracy" (of labels) for classifiers, else "token_accuracy"."""
    return "accuracy" if family in CLASSIFIERS else "token_accuracy"


def flatten_diagnostics(tree) -> dict[str, jnp.ndarray]:
    """{"encoder/layer_0/self_attention/attention_entropy": (v,)} -> "attention_entropy/..."."""
    flat = {}
    for path, value in jax.tree_util.tree_leaves_with_path(tree):
        keys = [getattr(k, "key", getattr(k, "idx", "")) for k in path]
        names = [str(k) for k in keys if isinstance(k, str)]
        flat[f"{names[-1]}/{'/'.join(names[:-1])}"] = value
    return flat


def init_state(model, optimizer, batch, rng) -> TrainState:
    """Parameters, BatchNorm statistics and optimizer state for a model and a sample batch."""
    init_rng, state_rng = jax.random.split(rng)
    args, kwargs = model_inputs(model.config.family, batch)

    @jax.jit
    def init(rng):
        variables = model.init(rng, *args, train=False, **kwargs)
        return variables["params"], variables.get("batch_stats", {})

    params, batch_stats = init(init_rng)
    return TrainState(
        step=jnp.int32(0),
        params=params,
        batch_stats=batch_stats,
        opt_state=optimizer.init(params),
        rng=state_rng,
    )


def count_params(params) -> int:
    return int(sum(x.size for x in jax.tree.leaves(params)))
