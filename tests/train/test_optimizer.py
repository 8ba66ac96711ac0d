"""Schedules against the formulas they document; optimizers against reference updates."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from transformer_jax import defaults
from transformer_jax.config import TrainConfig
from transformer_jax.train import optimizer
from transformer_jax.train.group_fields import GROUP_SCALARS


def _train_config(**overrides) -> TrainConfig:
    fields = {
        "steps": 1000,
        "learning_rate": 1.0,
        "schedule": "rsqrt",
        "warmup_steps": 100,
        "grad_clip_norm": 0.0,
        **overrides,
    }
    return TrainConfig(**fields)


def _lr(config, step, d_model=512):
    """The schedule at a 1-based step (optax passes count = step - 1)."""
    return float(optimizer.make_schedule(config, d_model)(step - 1))


@pytest.mark.parametrize("step", [1, 10, 3999, 4000, 4001, 100_000])
def test_rsqrt_matches_paper_formula(step):
    config = _train_config(warmup_steps=4000, steps=100_000, learning_rate=2.0)
    expected = 2.0 * 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    np.testing.assert_allclose(_lr(config, step), expected, rtol=1e-6)


def test_rsqrt_peak_is_papers_value_at_end_of_warmup():
    config = _train_config(warmup_steps=4000, steps=100_000)
    peaks = [_lr(config, s) for s in (3999, 4000, 4001)]
    assert peaks[1] == max(peaks)
    np.testing.assert_allclose(peaks[1], 512**-0.5 * 4000**-0.5, rtol=1e-6)  # ~6.99e-4


def test_rsqrt_without_warmup_is_inverse_sqrt_from_step_one():
    config = _train_config(warmup_steps=0)
    for step in (1, 2, 50, 1000):
        np.testing.assert_allclose(_lr(config, step, d_model=64), 64**-0.5 * step**-0.5, rtol=1e-6)


@pytest.mark.parametrize("warmup", [0, 100])
def test_cosine_matches_formula(warmup):
    config = _train_config(schedule="cosine", learning_rate=3e-3, warmup_steps=warmup, steps=1100)
    for step in (1, 50, 100, 101, 600, 1099, 1100, 1500):
        if step <= warmup:
            expected = 3e-3 * step / warmup
        else:
            progress = min((step - warmup) / (1100 - warmup), 1.0)
            expected = 3e-3 * 0.5 * (1 + math.cos(math.pi * progress))
        np.testing.assert_allclose(_lr(config, step), expected, rtol=1e-5, atol=1e-9)
    assert _lr(config, 1100) == pytest.approx(0.0, abs=1e-12)


def test_cosine_peaks_at_end_of_warmup_and_halves_midway():
    config = _train_config(schedule="cosine", learning_rate=1e-3, warmup_steps=100, steps=1100)
    assert _lr(config, 100) == pytest.approx(1e-3)
    assert _lr(config, 600) == pytest.approx(0.5e-3, rel=1e-5)


@pytest.mark.parametrize("warmup", [0, 10])
def test_constant_schedule(warmup):
    config = _train_config(schedule="constant", learning_rate=5e-4, warmup_steps=warmup)
    for step in (1, 5, 10, 11, 999):
        expected = 5e-4 * (min(step / warmup, 1.0) if warmup else 1.0)
        np.testing.assert_allclose(_lr(config, step), expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"schedule": "linear"}, r"train\.schedule='linear'.*rsqrt.*cosine.*constant"),
        ({"optimizer": "lion"}, r"train\.optimizer='lion'.*adam.*adamw.*sgd"),
        ({"steps": -5}, r"train\.steps=-5"),
        ({"steps": 0}, r"train\.steps=0"),
        ({"warmup_steps": -1}, r"train\.warmup_steps=-1"),
        ({"learning_rate": -1e-3}, r"train\.learning_rate=-0\.001"),
        ({"schedule": "cosine", "warmup_steps": 1000}, r"train\.warmup_steps=1000.*cosine"),
        ({"weight_decay": 0.1}, r"train\.weight_decay=0\.1.*'adam'"),
        ({"optimizer": "adamw", "weight_decay": -0.1}, r"train\.weight_decay=-0\.1"),
        ({"grad_clip_norm": -1.0}, r"train\.grad_clip_norm=-1\.0"),
        ({"b2": 1.0}, r"train\.b2=1\.0"),
        ({"eps": 0.0}, r"train\.eps=0\.0"),
    ],
)
def test_bad_config_raises_naming_field_and_value(overrides, message):
    with pytest.raises(ValueError, match=message):
        _train_config(**overrides)


def test_unknown_field_is_named():
    with pytest.raises(ValueError, match=r"train\.learing_rate"):
        TrainConfig.from_dict({"learing_rate": 1e-3})


@pytest.mark.parametrize("name", ["learning_rate", "b1", "eps", "grad_clip_norm", "momentum"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_values_are_refused(name, value):
    with pytest.raises(ValueError, match=rf"train\.{name}=.*finite"):
        _train_config(**{name: value})


def test_defaults_live_in_one_place():
    """The ConfigDict every config file starts from is TrainConfig's defaults, field for field."""
    assert TrainConfig.from_dict(defaults.train_config().to_dict()) == TrainConfig()


def _params():
    return {
        "dense": {"kernel": jnp.arange(6.0).reshape(2, 3) / 10, "bias": jnp.ones(3)},
        "norm": {"scale": jnp.full(3, 2.0)},
    }


def _grads(seed):
    params = _params()
    keys = jax.random.split(jax.random.PRNGKey(seed), len(jax.tree.leaves(params)))
    leaves = [
        jax.random.normal(k, p.shape) for k, p in zip(keys, jax.tree.leaves(params), strict=True)
    ]
    return jax.tree.unflatten(jax.tree.structure(params), leaves)


def test_adam_matches_reference_updates_and_reports_lr():
    config = _train_config(schedule="constant", learning_rate=1e-2, warmup_steps=2)
    tx = optimizer.make_optimizer(config, d_model=512)
    params = _params()
    opt_state = tx.init(params)
    update = jax.jit(tx.update)
    mu = jax.tree.map(np.zeros_like, params)
    nu = jax.tree.map(np.zeros_like, params)
    for t in (1, 2, 3):
        grads = _grads(t)
        updates, opt_state = update(grads, opt_state, params)
        lr = 1e-2 * min(t / 2, 1.0)
        np.testing.assert_allclose(optimizer.current_learning_rate(opt_state), lr, rtol=1e-6)
        mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * np.asarray(g), mu, grads)
        nu = jax.tree.map(lambda v, g: 0.98 * v + 0.02 * np.asarray(g) ** 2, nu, grads)
        expected = jax.tree.map(
            lambda m, v, lr=lr, t=t: -lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.98**t)) + 1e-9),
            mu,
            nu,
        )
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5), updates, expected)
        params = optax.apply_updates(params, updates)


def test_adamw_decays_only_matrices():
    config = _train_config(
        optimizer="adamw", schedule="constant", warmup_steps=0, learning_rate=0.5, weight_decay=0.1
    )
    tx = optimizer.make_optimizer(config, d_model=512)
    params = _params()
    zero_grads = jax.tree.map(jnp.zeros_like, params)  # Adam's own step is then exactly 0
    updates, _ = tx.update(zero_grads, tx.init(params), params)
    np.testing.assert_allclose(
        updates["dense"]["kernel"], -0.5 * 0.1 * params["dense"]["kernel"], rtol=1e-6
    )
    np.testing.assert_array_equal(updates["dense"]["bias"], 0.0)
    np.testing.assert_array_equal(updates["norm"]["scale"], 0.0)


def test_decay_mask_excludes_vectors_and_scalars():
    mask = optimizer.decay_mask({"k": jnp.ones((2, 2)), "b": jnp.ones(2), "s": jnp.ones(())})
    assert mask == {"k": True, "b": False, "s": False}


def test_decay_mask_excludes_attention_head_biases():
    query = {"kernel": jnp.ones((8, 2, 4)), "bias": jnp.ones((2, 4))}  # (D, N, H) and (N, H)
    assert optimizer.decay_mask({"query": query}) == {"query": {"kernel": True, "bias": False}}


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_global_norm_clipping(clip):
    config = _train_config(
        optimizer="sgd", schedule="constant", warmup_steps=0, learning_rate=1.0, grad_clip_norm=clip
    )
    tx = optimizer.make_optimizer(config, d_model=512)
    params = _params()
    grads = jax.tree.map(lambda g: 10 * g, _grads(0))
    updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    norm = float(optax.tree.norm(grads))
    scale = 1.0 / norm if clip else 1.0
    jax.tree.map(lambda u, g: np.testing.assert_allclose(u, -scale * g, rtol=1e-5), updates, grads)


# A run group's member (train/seed_group.py): its GROUP_SCALARS traced, the rest another
# member's config; it must update as the member's own config of numbers does.
_MEMBERS = (
    {"learning_rate": 2e-3, "warmup_steps": 0, "b1": 0.9, "b2": 0.98, "eps": 1e-9},
    {"learning_rate": 5e-4, "warmup_steps": 3, "b1": 0.8, "b2": 0.95, "eps": 1e-6},
)


@pytest.mark.parametrize("schedule", ["rsqrt", "cosine", "constant"])
def test_a_schedule_of_traced_scalars_equals_its_members_schedule(schedule):
    counts = jnp.arange(12)
    base = _train_config(schedule=schedule, steps=10, warmup_steps=5)

    @jax.jit
    def traced(learning_rate, warmup_steps):
        scalars = {"learning_rate": learning_rate, "warmup_steps": warmup_steps}
        return optimizer.make_schedule(base, 64, scalars)(counts)

    for member in _MEMBERS:
        own = _train_config(schedule=schedule, steps=10, **member)
        got = traced(jnp.float32(member["learning_rate"]), jnp.int32(member["warmup_steps"]))
        # float32 arithmetic where the numbers' schedule uses Python floats: rounding apart.
        np.testing.assert_allclose(got, optimizer.make_schedule(own, 64)(counts), rtol=1e-6)


def test_a_vmapped_optimizer_of_traced_scalars_updates_each_member_as_its_own():
    """Two adamw members with other rates, warmups, betas, eps, decay and clipping norms, one
    vmapped update: each member's parameters follow its own optimizer's."""
    params = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "b": jnp.ones(4)}
    grads = [jax.tree.map(lambda p, k=k: jnp.sin(p * (k + 2.0)) * 3.0, params) for k in range(4)]
    members = [
        {**member, "weight_decay": wd, "grad_clip_norm": clip}
        for member, wd, clip in zip(_MEMBERS, (0.1, 0.0), (1.0, 0.5), strict=True)
    ]
    configs = [_train_config(optimizer="adamw", schedule="cosine", **m) for m in members]
    scalars = {
        name: jnp.asarray([m[name] for m in members], jnp.int32 if name == "warmup_steps" else None)
        for name in GROUP_SCALARS
    }

    def member_update(scalar, state, grad, p):
        tx = optimizer.make_optimizer(configs[0], 64, scalar)
        updates, state = tx.update(grad, state, p)
        return optax.apply_updates(p, updates), state

    init = jax.vmap(lambda s: optimizer.make_optimizer(configs[0], 64, s).init(params))
    states, group = init(scalars), jax.tree.map(lambda p: jnp.stack([p, p]), params)
    step = jax.jit(jax.vmap(member_update, in_axes=(0, 0, None, 0)))
    for grad in grads:
        group, states = step(scalars, states, grad, group)
    for i, config in enumerate(configs):
        tx, own = optimizer.make_optimizer(config, 64), params
        state = tx.init(own)
        for grad in grads:
            updates, state = tx.update(grad, state, own)
            own = optax.apply_updates(own, updates)
        for ours, theirs in zip(jax.tree.leaves(group), jax.tree.leaves(own), strict=True):
            np.testing.assert_allclose(ours[i], theirs, rtol=1e-6, atol=1e-7)
        assert float(states.hyperparams["b1"][i]) == pytest.approx(members[i]["b1"])
