"""Multi-device cases for test_parallel.py, run in a subprocess with simulated CPU devices.

XLA_FLAGS=--xla_force_host_platform_device_count=N must be set before JAX starts, so the test
runs `python parallel_cases.py CASE ARGS...` with that environment; each case prints one JSON
line. Cases:
  steps DIR LAYOUTS one train step per layout of the comma-separated LAYOUTS (names of
                    LAYOUTS below: jit on 8 devices, fsdp, pmap, gradient accumulation, seed
                    groups on 8 devices), each against one device: loss and max |param -
                    reference| per layout; then trains one step sharded (fsdp=4 on 8 devices),
                    checkpoints it to DIR, and writes the parameters to DIR/expected.npz.
  restore DIR       restores DIR's checkpoint onto this process's devices; max |param - expected|.
"""

import functools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from tiny_configs import tiny_model, tiny_sgd

from transformer_jax.models import build_model
from transformer_jax.train import parallel as par
from transformer_jax.train import step as steps
from transformer_jax.train.checkpoint import Checkpointer
from transformer_jax.train.optimizer import make_optimizer
from transformer_jax.train.seed_group import compile_group_train, stack, unstack

BATCH = 16


@functools.cache
def setup():
    """(initial state, batch, train step), built once per process, as initialising traces the
    model (seconds). The state is host (NumPy) arrays, so each layout places a copy of its own
    on its devices: a compiled step donates (deletes) the state it is given, which must not be
    the one the next layout starts from."""
    cfg = tiny_model("decoder_only")
    train = tiny_sgd(learning_rate=0.5)
    model, optimizer = build_model(cfg), make_optimizer(train, cfg.d_model)
    rng = np.random.default_rng(0)
    targets = rng.integers(3, 13, size=(BATCH, 8)).astype(np.int32)
    targets[::3, 5:] = 0  # Rows of different lengths: devices hold different token counts.
    batch = {"targets": targets, "example_weights": np.ones(BATCH, np.float32)}
    state = jax.device_get(steps.init_state(model, optimizer, batch, jax.random.PRNGKey(0)))
    step = functools.partial(steps.train_step, model=model, optimizer=optimizer, label_smoothing=0)
    return state, batch, step


def one_step(kind, *, fsdp=1, devices=None, accum=1):
    state, batch, step = setup()
    if kind == "jit":
        layout = par.Parallel("jit", par.make_mesh(fsdp, devices))
    else:
        layout = par.Parallel("pmap", None)
    placed = layout.place_state(state)
    train_fn = layout.compile_train(functools.partial(step, grad_accum_steps=accum), placed)
    new_state, metrics = train_fn(placed, batch)
    return jax.device_get(layout.host_state(new_state).params), float(metrics["loss"])


def group_step(num_seeds=2):
    """One step of a seed group on all devices, the reference's seed second; the others start
    from shifted parameters and read the batch reversed. Two seeds on 8 devices split each
    seed's batch; 8 seeds on 8 devices give each seed a device of its own."""
    state, batch, step = setup()
    others = [
        jax.tree.map(lambda x, k=k: x + k if x.dtype.kind == "f" else x, state)
        for k in range(1, num_seeds)
    ]
    reversed_batch = jax.tree.map(lambda x: x[::-1], batch)
    mesh = par.make_mesh(1)
    # The members share every optimizer scalar here: their traced scalars are empty.
    train_fn = compile_group_train(lambda state, batch, _: step(state, batch), mesh, num_seeds)
    new_state, metrics = train_fn(
        stack([others[0], state, *others[1:]]),
        stack([reversed_batch, batch, *[reversed_batch] * (num_seeds - 2)]),
        {},
    )
    spec = jax.tree.leaves(new_state.params)[0].sharding.spec
    axes = [list(a) if isinstance(a, tuple) else a for a in spec]  # JSON: [["data", "fsdp"]]
    return jax.device_get(unstack(new_state, 1).params), float(metrics["loss"][1]), axes


# name -> one_step's arguments (devices=1: the first device only), or the seeds of a group.
LAYOUTS = {
    "jit8": dict(kind="jit"),
    "fsdp2": dict(kind="jit", fsdp=2),
    "pmap8": dict(kind="pmap"),
    "accum4": dict(kind="jit", devices=1, accum=4),
    "accum2_pmap8": dict(kind="pmap", accum=2),
    "group8": {"seeds": 2},
    "group8_sharded": {"seeds": 8},
}


def case_steps(directory, layouts):
    reference, ref_loss = one_step("jit", devices=jax.devices()[:1])
    out = {"devices": jax.device_count(), "reference_loss": ref_loss}
    for name in layouts.split(","):
        kwargs, spec = dict(LAYOUTS[name]), None
        if "seeds" in kwargs:
            params, loss, spec = group_step(kwargs["seeds"])
        else:
            if "devices" in kwargs:
                kwargs["devices"] = jax.devices()[: kwargs["devices"]]
            params, loss = one_step(**kwargs)
        diffs = jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), params, reference)
        out[name] = {"loss": loss, "max_param_diff": max(jax.tree.leaves(diffs)), "spec": spec}
    _, _, step = setup()
    state, _, _ = setup()
    mesh = par.make_mesh(4)
    out["fsdp_sharded_leaves"] = sum(
        s.spec != jax.sharding.PartitionSpec()
        for s in jax.tree.leaves(par.state_shardings(mesh, state).params)
    )
    out["save"] = case_save(directory)
    return out


def case_save(directory):
    state, batch, step = setup()
    layout = par.Parallel("jit", par.make_mesh(4))
    placed = layout.place_state(state)
    new_state, _ = layout.compile_train(step, placed)(placed, batch)
    with Checkpointer(directory, every=1, keep=1) as checkpointer:
        checkpointer.save(1, new_state, {"position": 1}, force=True)
    flat = {jax.tree_util.keystr(k): np.asarray(v) for k, v in _leaves(new_state.params)}
    np.savez(f"{directory}/expected.npz", **flat)
    kernel = new_state.params["decoder"]["layer_0"]["ffn"]["wi"]["kernel"]
    return {"devices": jax.device_count(), "saved_shards": len(kernel.addressable_shards)}


def case_restore(directory):
    state, _, _ = setup()
    layout = par.Parallel("jit", par.make_mesh(1))
    with Checkpointer(directory, every=1, keep=1) as checkpointer:
        restored, data_state = checkpointer.restore(layout.place_state(state))
    expected = np.load(f"{directory}/expected.npz")
    diffs = [
        float(np.max(np.abs(np.asarray(v) - expected[jax.tree_util.keystr(k)])))
        for k, v in _leaves(restored.params)
    ]
    return {
        "devices": jax.device_count(),
        "max_param_diff": max(diffs),
        "step": int(restored.step),
        "data_state": data_state,
    }


def _leaves(tree):
    return jax.tree_util.tree_leaves_with_path(tree)


if __name__ == "__main__":
    jax.config.update("jax_numpy_rank_promotion", "raise")
    name, *args = sys.argv[1:]
    result = {"steps": case_steps, "restore": case_restore}[name](*args)
    print(json.dumps(result, default=lambda x: jnp.asarray(x).tolist()))
