"""Pure, jittable training and evaluation steps: `(state, batch) -> (state, metrics)`.

Metrics leave the device as sums and counts; the host divides (as the flax examples do), so
averages over many batches are exact whatever the padding.
"""

import functools
from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax

from transformer_jax.config import TrainConfig
from transformer_jax.config.train import THREEFRY_MODES
from transformer_jax.families import family_of
from transformer_jax.train import losses
from transformer_jax.train.numerics import tree_norm

# The "positions" rng stream (random training positions, model.positional.train_positions) is
# folded from the dropout key, so the dropout masks stay what they were without it.
POSITIONS_STREAM = 1
# Random evaluation positions (model.positional.eval_positions) come from this stream of the
# run's key, folded with a fingerprint of the batch: see `eval_positions_key`.
EVAL_POSITIONS_STREAM = 2


@flax.struct.dataclass
class TrainState:
    step: jnp.ndarray  # int32 scalar: updates applied so far.
    params: Any
    batch_stats: Any  # BatchNorm running averages; {} for the other norms.
    opt_state: Any
    rng: jnp.ndarray  # Base key; step k uses fold_in(rng, k), so resuming replays exactly.

    @property
    def variables(self) -> dict:
        """The flax variables `model.apply` takes: the parameters, and the BatchNorm statistics
        when the model keeps any (`state.replace(params=p).variables` for other parameters)."""
        if not self.batch_stats:
            return {"params": self.params}
        return {"params": self.params, "batch_stats": self.batch_stats}


def forward(model, variables, batch, *, train: bool, rngs=None, mutable=False):
    """Runs the model on a batch; returns (logits, targets, loss weights, mutated collections)."""
    family = family_of(model.config)
    tokens = model.config.tokens  # PAD is masked, BOS read first: the model's own ids
    args, kwargs = family.inputs(batch, tokens)
    out = model.apply(variables, *args, train=train, rngs=rngs, mutable=mutable, **kwargs)
    logits, collections = out if mutable else (out, {})
    if family.classifier:
        return logits, batch["label"], batch["example_weights"], collections
    targets_BT, weights_BT = family.targets(batch, tokens)
    return logits, targets_BT, weights_BT, collections


def train_step(
    state: TrainState,
    batch,
    *,
    model,
    optimizer,
    label_smoothing: float,
    grad_accum_steps: int = 1,
    axis_name: str | None = None,
):
    """One optimizer update on `batch`. Dropout keys come from fold_in(rng, step).

    The loss is the token-weighted mean over the whole batch, so gradients are accumulated as
    sums and divided by the total weight once: `grad_accum_steps = k` splits the batch into k
    strided micro-batches (rows i, i + k, ...; each device keeps its share of every one) run one
    after another in a `lax.scan`, which gives the update of the full batch with the activation
    memory of B / k rows (micro-batch i draws dropout from fold_in(key, i); BatchNorm running
    statistics are updated once per micro-batch). Under `jax.pmap(axis_name=...)` the sums are
    `lax.psum`-ed over devices before dividing, so N devices equal one device with N times the
    batch even when devices hold different numbers of real tokens; BatchNorm running statistics
    are averaged (`lax.pmean`). Under `jax.jit` with sharded inputs XLA inserts these itself.
    """
    dropout_rng = jax.random.fold_in(state.rng, state.step)
    mutable = ["batch_stats"] if state.batch_stats else False

    def micro_step(batch_stats, micro_batch, rng):
        """Gradient of the summed loss, the sums behind the metrics, and new BatchNorm stats."""

        def loss_fn(params):
            logits, targets, weights, new_state = forward(
                model,
                state.replace(params=params, batch_stats=batch_stats).variables,
                micro_batch,
                train=True,
                rngs={"dropout": rng, "positions": jax.random.fold_in(rng, POSITIONS_STREAM)},
                mutable=[*(mutable or []), "losses"],
            )
            loss_sum, weight_sum = losses.cross_entropy(logits, targets, weights, label_smoothing)
            # Auxiliary losses the model sows (the Universal Transformer's ACT ponder cost) are
            # means; weighted by the tokens, so the divide below leaves them means.
            auxiliary = sum(jax.tree.leaves(new_state.get("losses", {})), jnp.float32(0.0))
            correct, count = losses.token_accuracy(logits, targets, weights)
            sums = {"loss": loss_sum, "weight": weight_sum, "correct": correct, "count": count}
            objective = loss_sum + auxiliary * weight_sum
            return objective, (sums, new_state.get("batch_stats", batch_stats))

        grads, (sums, batch_stats) = jax.grad(loss_fn, has_aux=True)(state.params)
        return grads, sums, batch_stats

    if grad_accum_steps == 1:
        grads, sums, batch_stats = micro_step(state.batch_stats, batch, dropout_rng)
    else:
        k = grad_accum_steps
        micro_batches = jax.tree.map(
            lambda x: x.reshape(x.shape[0] // k, k, *x.shape[1:]).swapaxes(0, 1), batch
        )  # (k, B / k, ...): micro-batch i holds rows i, i + k, i + 2k, ...

        def accumulate(carry, xs):
            grads, sums, batch_stats = carry
            index, micro_batch = xs
            g, s, batch_stats = micro_step(
                batch_stats, micro_batch, jax.random.fold_in(dropout_rng, index)
            )
            return (jax.tree.map(jnp.add, grads, g), jax.tree.map(jnp.add, sums, s), batch_stats)

        zero_sums = dict.fromkeys(("loss", "weight", "correct", "count"), jnp.float32(0.0))
        zero_grads = jax.tree.map(jnp.zeros_like, state.params)
        (grads, sums, batch_stats), _ = jax.lax.scan(
            lambda carry, xs: (accumulate(carry, xs), None),
            (zero_grads, zero_sums, state.batch_stats),
            (jnp.arange(k), micro_batches),
        )
    if axis_name is not None:
        grads, sums = jax.lax.psum((grads, sums), axis_name)
        batch_stats = jax.lax.pmean(batch_stats, axis_name)
    total = jnp.maximum(sums["weight"], 1.0)
    grads = jax.tree.map(lambda g: g / total, grads)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {
        "loss": sums["loss"] / total,
        family_of(model.config).accuracy_name: sums["correct"] / jnp.maximum(sums["count"], 1.0),
        "tokens": sums["count"],
        "grad_norm": tree_norm(grads),
        "param_norm": tree_norm(params),
        "update_norm": tree_norm(updates),
    }
    new_state = state.replace(
        step=state.step + 1, params=params, opt_state=opt_state, batch_stats=batch_stats
    )
    return new_state, metrics


def threefry_partitionable(mode: str, num_devices: int) -> bool:
    """Whether dropout masks use JAX's partitionable threefry (`train.threefry`).

    "partitionable" (JAX's default) draws the same bits however the batch is sharded, which a
    step sharded over several devices needs; "sequential", JAX's original scheme, draws them
    several times faster on a CPU. "auto" takes "sequential" on one device, else
    "partitionable". The two give different (equally random) masks.
    """
    if mode not in THREEFRY_MODES:
        raise ValueError(f"train.threefry={mode!r} is not valid; choose one of {THREEFRY_MODES}")
    if mode == "auto":
        return num_devices > 1
    return mode == "partitionable"


def make_train_step(model, optimizer, train_config: TrainConfig, num_devices: int):
    """The trainer's step: `train_step` bound to the model, optimizer and `config.train`, traced
    with the threefry scheme `train.threefry` picks for `num_devices`."""
    step = functools.partial(
        train_step,
        model=model,
        optimizer=optimizer,
        label_smoothing=float(train_config.label_smoothing),
        grad_accum_steps=train_config.grad_accum_steps,
    )
    partitionable = threefry_partitionable(train_config.threefry, num_devices)

    @functools.wraps(train_step)
    def step_with_threefry(state, batch, **kwargs):
        with jax.threefry_partitionable(partitionable):  # Read while tracing.
            return step(state, batch, **kwargs)

    return step_with_threefry


def batch_fingerprint(batch) -> jnp.ndarray:
    """A uint32 hash of a batch's integer arrays (token ids, weights' lengths): different
    batches get different values, the same batch the same one, with nothing counted outside."""
    fingerprint = jnp.uint32(0)
    for name in sorted(batch):
        x = jnp.asarray(batch[name])
        if not jnp.issubdtype(x.dtype, jnp.integer):
            continue
        flat = x.reshape(-1).astype(jnp.uint32)
        # Knuth's multiplicative constant, per index: the sum depends on where each id sits.
        weights = (jnp.arange(flat.size, dtype=jnp.uint32) + 1) * jnp.uint32(2654435761)
        fingerprint = fingerprint * jnp.uint32(31) + jnp.sum(flat * weights, dtype=jnp.uint32)
    return fingerprint


def eval_positions_key(state: TrainState, batch) -> jnp.ndarray:
    """The "positions" key of one evaluation batch: a fresh draw per batch, as Ruoss et al.
    2023's range evaluation (experiments/range_evaluation.py: `next(rng_seq)` per batch) and
    tensor2tensor (a random op at every call) have, yet reproducible: a function of the run's
    seed (state.rng) and the batch, so a batch is read at the same positions at every
    evaluation of a run and a rerun of the seed reads it at the same positions again."""
    key = jax.random.fold_in(state.rng, EVAL_POSITIONS_STREAM)
    return jax.random.fold_in(key, batch_fingerprint(batch))


def eval_step(state: TrainState, batch, *, model, diagnostics: bool):
    """Sums for loss, accuracy (per token, or per example for classifiers) and sequence exact
    match; attention diagnostics as means. Random evaluation positions
    (model.positional.eval_positions) are drawn from `eval_positions_key`."""
    random_positions = model.config.positional.eval_positions != "plain"
    logits, targets, weights, collected = forward(
        model,
        state.variables,
        batch,
        train=False,
        rngs={"positions": eval_positions_key(state, batch)} if random_positions else None,
        mutable=["diagnostics"] if diagnostics else False,
    )
    loss_sum, weight_sum = losses.cross_entropy(logits, targets, weights, 0.0)
    correct, count = losses.token_accuracy(logits, targets, weights)
    family = family_of(model.config)
    sums = {"loss": (loss_sum, weight_sum), family.accuracy_name: (correct, count)}
    if not family.classifier:
        sums["seq_accuracy"] = losses.sequence_accuracy(
            logits, targets, batch["example_weights"], weights
        )
    for name, value in flatten_diagnostics(collected.get("diagnostics", {})).items():
        sums[name] = (value, jnp.float32(1.0))
    return sums


def flatten_diagnostics(tree) -> dict[str, jnp.ndarray]:
    """{"encoder/layer_0/self_attention/attention_entropy": (v,)} -> "attention_entropy/...".

    Scanned stacks (`model.scan_layers`) sow one value per layer under "layers"; they get the
    same layer_i names as unrolled stacks.
    """
    flat = {}
    for path, value in jax.tree_util.tree_leaves_with_path(tree):
        keys = [getattr(k, "key", getattr(k, "idx", "")) for k in path]
        names = [str(k) for k in keys if isinstance(k, str)]
        if "layers" in names and jnp.ndim(value) == 1:
            at = names.index("layers")
            for i in range(value.shape[0]):
                layer = [*names[:at], f"layer_{i}", *names[at + 1 :]]
                flat[f"{layer[-1]}/{'/'.join(layer[:-1])}"] = value[i]
            continue
        # Values sown inside the Universal Transformer's scan are stacked per step: averaged.
        flat[f"{names[-1]}/{'/'.join(names[:-1])}"] = jnp.mean(value)
    return flat


def make_init(model, optimizer, batch):
    """rng -> the TrainState `init_state` returns, one compiled program for every rng.

    Compiling the initializers' random number generation costs seconds on XLA:CPU (more than the
    train step of a small model), so the seeds of a group share this program instead of
    compiling one each; the optimizer state is built inside it rather than op by op. A run
    group whose members differ in optimizer scalars passes `optimizer` as a function of a
    member's scalars (train/seed_group.py) and calls `init(rng, scalars)`: one program still."""
    args, kwargs = family_of(model.config).inputs(batch, model.config.tokens)

    @jax.jit
    def init(rng, scalars=None):
        init_rng, state_rng = jax.random.split(rng)
        variables = model.init(init_rng, *args, train=False, **kwargs)
        params = variables["params"]
        transformation = optimizer if scalars is None else optimizer(scalars)
        return TrainState(
            step=jnp.int32(0),
            params=params,
            batch_stats=variables.get("batch_stats", {}),
            opt_state=transformation.init(params),
            rng=state_rng,
        )

    return init


def init_state(model, optimizer, batch, rng) -> TrainState:
    """Parameters, BatchNorm statistics and optimizer state for a model and a sample batch."""
    return make_init(model, optimizer, batch)(rng)


def count_params(params) -> int:
    return int(sum(x.size for x in jax.tree.leaves(params)))
