"""Universal Transformer and ACT: halting math, shared weights, causality, cached decoding."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from tiny_configs import tiny_model

from transformer_jax import decoding
from transformer_jax.config import (
    ModelConfig,
)
from transformer_jax.layers.positional import sinusoidal_table
from transformer_jax.models import build_model
from transformer_jax.models.universal import ActState, UniversalStack, act_update

TINY = tiny_model("decoder_only", {"positional.max_len": 16, "universal.steps": 3}, vocab_size=16)
# Halting probabilities near 0.5 at initialisation and a threshold of 0.5: some positions halt
# after one step, others run on, so every ACT branch is exercised.
ACT = TINY.override(
    {
        "universal.act": True,
        "universal.act_threshold_eps": 0.5,
        "universal.act_halting_bias_init": 0.0,
    }
)
IDS = jnp.array([[3, 4, 5, 6, 7, 8], [9, 10, 11, 5, 0, 0]], jnp.int32)


def reference_act(p_SBT, threshold):
    """Graves 2016 in NumPy, per position: N, R and the weight of every step (S, B, T)."""
    num_steps = p_SBT.shape[0]
    weights = np.zeros_like(p_SBT)
    steps = np.zeros(p_SBT.shape[1:])
    remainders = np.zeros(p_SBT.shape[1:])
    for b, t in np.ndindex(*p_SBT.shape[1:]):
        total = 0.0
        for n in range(num_steps):
            if total + p_SBT[n, b, t] > threshold or n == num_steps - 1:
                weights[n, b, t] = remainders[b, t] = 1.0 - total
                steps[b, t] = n + 1
                break
            weights[n, b, t] = p_SBT[n, b, t]
            total += p_SBT[n, b, t]
    return weights, steps, remainders


@pytest.mark.parametrize("threshold", [0.99, 0.5])
def test_act_update_matches_graves_and_weights_sum_to_one(threshold):
    num_steps, shape = 5, (3, 7)
    p_SBT = np.asarray(jax.random.uniform(jax.random.PRNGKey(0), (num_steps, *shape)))
    zeros = jnp.zeros(shape)
    carry = ActState(
        jnp.zeros((*shape, num_steps)), jnp.zeros((*shape, num_steps)), zeros, zeros, zeros
    )
    for n in range(num_steps):
        # State n is the one-hot e_n, so the output's feature n is the weight of step n.
        state = jnp.broadcast_to(jax.nn.one_hot(n, num_steps), (*shape, num_steps))
        carry = act_update(
            carry, state, p_SBT[n], is_last=n == num_steps - 1, threshold=threshold, freeze=True
        )
    weights, steps, remainders = reference_act(p_SBT, threshold)
    np.testing.assert_allclose(np.moveaxis(np.asarray(carry.output_BTD), -1, 0), weights, atol=1e-6)
    np.testing.assert_allclose(carry.output_BTD.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(carry.steps_BT, steps)
    np.testing.assert_allclose(carry.remainder_BT, remainders, atol=1e-6)
    assert steps.min() >= 1 and steps.max() <= num_steps


def apply(cfg, variables, ids=IDS, mutable=("intermediates", "losses")):
    return build_model(cfg).apply(variables, ids, mutable=list(mutable))


def test_steps_never_exceed_the_maximum_and_ponder_is_reported():
    cfg = ACT.override({"universal.act_threshold_eps": 0.01, "universal.steps": 2})
    variables = {"params": build_model(cfg).init(jax.random.PRNGKey(0), IDS)["params"]}
    _, state = apply(cfg, variables, mutable=("intermediates", "diagnostics"))
    steps_BT = state["intermediates"]["decoder"]["ponder_steps"][0]
    # A threshold of 0.99 is out of reach of 2 probabilities near 0.5: all run to the maximum.
    np.testing.assert_array_equal(steps_BT, 2.0)
    assert float(state["diagnostics"]["decoder"]["ponder_max"][0]) == 2.0


def test_one_step_threshold_equals_a_single_block_application():
    # threshold 0: halt at once
    one_step = ACT.override({"universal.act_threshold_eps": 1.0, "universal.steps": 4})
    params = build_model(one_step).init(jax.random.PRNGKey(0), IDS)["params"]
    out, state = apply(one_step, {"params": params})
    np.testing.assert_array_equal(state["intermediates"]["decoder"]["ponder_steps"][0], 1.0)
    block_params = jax.tree.map(lambda x: x, params)
    del block_params["decoder"]["recurrence"]["halting"]
    single = build_model(TINY.override({"universal.steps": 1})).apply({"params": block_params}, IDS)
    np.testing.assert_allclose(out, single, rtol=1e-5, atol=1e-5)


def reference_ponder_cost(state_steps_UBTD, halting, valid_BT, universal) -> float:
    """tau * mean(N + R) by Graves (2016) in NumPy, position by position, from the states each
    step produced and the halting unit's parameters."""
    kernel, bias = np.asarray(halting["kernel"])[:, 0], float(np.asarray(halting["bias"])[0])
    p_UBT = 1 / (1 + np.exp(-(np.asarray(state_steps_UBTD) @ kernel + bias)))
    threshold = 1.0 - universal.act_threshold_eps
    num_steps = p_UBT.shape[0]
    rho_BT = np.zeros(p_UBT.shape[1:])
    for b, t in np.ndindex(*rho_BT.shape):
        total = 0.0
        for n in range(num_steps):
            if total + p_UBT[n, b, t] > threshold or n == num_steps - 1:
                rho_BT[b, t] = (n + 1) + (1.0 - total)  # N + R
                break
            total += p_UBT[n, b, t]
    valid = np.asarray(valid_BT)
    return universal.act_ponder_cost * (rho_BT * valid).sum() / valid.sum()


def test_ponder_cost_is_differentiable_through_the_remainders_only():
    params = build_model(ACT).init(jax.random.PRNGKey(0), IDS)["params"]
    valid_BT = (IDS != 0).astype(jnp.float32)

    def ponder(params):
        """-> [sown cost, tau * mean(N + R), tau * mean(R)] over real positions."""
        _, state = apply(ACT, {"params": params})
        steps_BT = state["intermediates"]["decoder"]["ponder_steps"][0]
        remainders_BT = state["intermediates"]["decoder"]["ponder_remainders"][0]
        mean = lambda x: (x * valid_BT).sum() / valid_BT.sum()  # noqa: E731
        tau = ACT.universal.act_ponder_cost
        return tau * jnp.stack(
            [
                state["losses"]["decoder"]["ponder_cost"][0] / tau,
                mean(steps_BT + remainders_BT),
                mean(remainders_BT),
            ]
        )

    values = ponder(params)
    _, state = apply(ACT, {"params": params})
    expected = reference_ponder_cost(
        state["intermediates"]["decoder"]["recurrence"]["step_states"][0],
        params["decoder"]["recurrence"]["halting"],
        valid_BT,
        ACT.universal,
    )
    np.testing.assert_allclose(values[0], expected, rtol=1e-5)
    np.testing.assert_allclose(values[0], values[1], rtol=1e-6)
    jacobian = jax.jit(jax.jacrev(ponder))(params)  # one row per entry of `ponder`
    rows = [ravel_pytree(jax.tree.map(lambda j, i=i: j[i], jacobian))[0] for i in range(3)]
    np.testing.assert_allclose(rows[0], rows[2], atol=1e-7)  # N adds no gradient
    halting_kernel = jacobian["decoder"]["recurrence"]["halting"]["kernel"][0]
    assert float(jnp.abs(halting_kernel).sum()) > 0


def test_unrolled_steps_compute_what_the_loop_does():
    """`universal.unroll` compiles the same steps without the loop (for XLA's cost analysis,
    which counts a loop's body once): equal outputs, ponder and gradients, and every step's
    matmuls in the compiled program's count."""
    params = build_model(ACT).init(jax.random.PRNGKey(0), IDS)["params"]
    unrolled = ACT.override({"universal.unroll": True})

    def loss(cfg, params):
        out, state = apply(cfg, {"params": params})
        return jnp.square(out.astype(jnp.float32)).mean(), state["intermediates"]

    value_and_grad = jax.jit(jax.value_and_grad(loss, 1, has_aux=True), static_argnums=0)
    (looped, looped_state), looped_grads = value_and_grad(ACT, params)
    (same, same_state), same_grads = value_and_grad(unrolled, params)
    np.testing.assert_allclose(same, looped, rtol=1e-6)
    same, looped = (
        jax.tree.leaves((same_state, same_grads)),
        jax.tree.leaves((looped_state, looped_grads)),
    )
    for got, want in zip(same, looped, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    def flops(cfg):
        compiled = jax.jit(lambda p: apply(cfg, {"params": p})[0]).lower(params).compile()
        analysis = compiled.cost_analysis()
        return (analysis[0] if isinstance(analysis, list) else analysis)["flops"]

    # Three steps: the loop's count holds one step's block, the unrolled count all three.
    assert flops(unrolled) > 2 * flops(ACT)


def stack_outputs(cfg, causal, x, seed=1):
    stack = UniversalStack(cfg, cfg.num_decoder_layers, causal=causal)
    kwargs = {"valid_BT": jnp.ones(x.shape[:2], bool)}
    variables = stack.init(jax.random.PRNGKey(seed), x, **kwargs)
    return stack, variables, kwargs


@pytest.mark.parametrize("act_halted", ["freeze", "transform"])
def test_act_decoder_is_causal(act_halted):
    cfg = ACT.override({"universal.act_halted": act_halted})
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 6, cfg.d_model))
    stack, variables, kwargs = stack_outputs(cfg, True, x)
    jac = jax.jacobian(lambda x: stack.apply(variables, x, **kwargs)[0])(x)[:, :, 0]  # (T,D,T,D)
    sensitivity = np.abs(np.asarray(jac)).sum(axis=(1, 3))  # output i <- input j
    assert np.all(sensitivity[np.triu_indices(6, k=1)] == 0.0)
    assert np.all(sensitivity[np.tril_indices(6)] > 0.0)


def test_freeze_and_transform_differ_only_for_halted_positions():
    cfg = ACT.override({"universal.steps": 2})
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 6, cfg.d_model))
    stack, variables, kwargs = stack_outputs(cfg, False, x)
    results = {}
    for mode in ("freeze", "transform"):
        out, state = stack.clone(config=cfg.override({"universal.act_halted": mode})).apply(
            variables, x, **kwargs, mutable=["intermediates"]
        )
        results[mode] = out, state["intermediates"]
    steps_BT = np.asarray(results["freeze"][1]["ponder_steps"][0])
    halted_BT = steps_BT == 1
    assert halted_BT.any() and not halted_BT.all()
    # The second step's states: a position halted after step 1 is copied (freeze) or
    # transformed again (transform); a running position sees the same inputs either way.
    second = {m: np.asarray(r[1]["recurrence"]["step_states"][0][1]) for m, r in results.items()}
    differs_BT = np.abs(second["freeze"] - second["transform"]).max(-1) > 1e-6
    np.testing.assert_array_equal(differs_BT, halted_BT)
    # With two steps the outputs agree: a halted position's own output is frozen either way.
    np.testing.assert_allclose(results["freeze"][0], results["transform"][0], atol=1e-6)


def test_step_input_halting_reads_tensor2tensors_step_preprocess():
    """halting_input="step_input": p_t = sigmoid(dense(state_{t-1} + P + S_t)), tensor2tensor's
    dense(step_preprocess(state)) (universal_transformer_util.py:1093-1108), in NumPy from the
    stack's input, its sinusoidal tables and the states each step produced."""
    cfg = ACT.override({"universal.act_halted": "transform", "universal.steps": 3})
    x = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (2, 6, cfg.d_model)))
    stack, variables, kwargs = stack_outputs(cfg, False, jnp.asarray(x))
    variables = {"params": variables["params"]}  # not init's sown ponder cost
    costs = {}
    for halting_input in ("step_input", "block_output"):
        reading = cfg.override({"universal.halting_input": halting_input})
        _, state = stack.clone(config=reading).apply(
            variables, x, **kwargs, mutable=["intermediates", "losses"]
        )
        costs[halting_input] = float(state["losses"]["ponder_cost"][0])
        step_states = np.asarray(state["intermediates"]["recurrence"]["step_states"][0])
    num_steps, (_, length, d_model) = cfg.universal.steps, x.shape
    positions_TD = sinusoidal_table(cfg.positional.max_len, d_model)[:length]
    steps_UD = sinusoidal_table(num_steps + 1, d_model)[1:]
    previous = np.concatenate([x[None], step_states[:-1]])  # state_{t-1}, t = 1..U ("transform")
    step_inputs_UBTD = previous + positions_TD[None, None] + steps_UD[:, None, None]
    halting = variables["params"]["recurrence"]["halting"]
    valid_BT = np.ones(x.shape[:2])
    expected = reference_ponder_cost(step_inputs_UBTD, halting, valid_BT, cfg.universal)
    np.testing.assert_allclose(costs["step_input"], expected, rtol=1e-5)
    # The default reads the block's output, the states themselves: another cost.
    reference_output = reference_ponder_cost(step_states, halting, valid_BT, cfg.universal)
    np.testing.assert_allclose(costs["block_output"], reference_output, rtol=1e-5)
    assert abs(costs["step_input"] - costs["block_output"]) > 1e-4


def test_parameter_count_does_not_depend_on_steps():
    def shapes(cfg):
        return jax.eval_shape(build_model(cfg).init, jax.random.PRNGKey(0), IDS)["params"]

    one = shapes(TINY.override({"universal.steps": 1}))
    many = shapes(TINY.override({"universal.steps": 8}))
    assert jax.tree.map(lambda s: s.shape, one) == jax.tree.map(lambda s: s.shape, many)
    count = lambda p: sum(s.size for s in jax.tree.leaves(p))  # noqa: E731
    vanilla = count(shapes(TINY.replace(universal=None)))
    assert count(many) < vanilla  # one block instead of num_decoder_layers = 2


@pytest.mark.parametrize(
    "cfg",
    [
        ACT,
        # The same cache through an encoder-decoder's recurrence (about half a minute more).
        pytest.param(
            ACT.override(
                {
                    "family": "encoder_decoder",
                    "positional.kind": "rotary",
                    "norm.kind": "rmsnorm",
                    "norm.position": "pre",
                    "universal.act_halted": "transform",
                    "num_encoder_layers": 1,
                }
            ),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["decoder_only", "encoder_decoder_rotary_prenorm_transform"],
)
def test_cached_decoding_equals_full_forward(cfg):
    model = build_model(cfg)
    source = IDS if cfg.family == "encoder_decoder" else None
    sequence = jnp.array([[1, 4, 5, 6, 7], [1, 9, 3, 0, 10]], jnp.int32)
    args = (IDS, sequence) if source is not None else (sequence,)
    variables = model.init(jax.random.PRNGKey(0), *args)
    variables = {"params": variables["params"]}
    step, cache = decoding.cached_step(
        model, variables, batch_size=2, length=sequence.shape[1], inputs_BS=source
    )
    logits = []
    for k in range(sequence.shape[1]):
        logits_BV, cache = jax.jit(step)(cache, sequence[:, k])
        logits.append(logits_BV)
    np.testing.assert_allclose(
        jnp.stack(logits, axis=1), model.apply(variables, *args), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"enabled": False, "act": True}, "model.universal.act=True has no effect unless enabled"),
        ({"enabled": False, "steps": 3}, "model.universal.steps=3 has no effect unless enabled"),
        ({"act_threshold_eps": 0.0}, "model.universal.act_threshold_eps=0.0"),
        ({"act_halted": "copy"}, "model.universal.act_halted='copy'"),
        ({"steps": -1}, "model.universal.steps=-1"),
        ({"act_ponder_cost": -0.1}, "model.universal.act_ponder_cost=-0.1"),
        ({"unroll": "yes"}, "model.universal.unroll='yes'"),
    ],
)
def test_bad_universal_config_is_rejected(fields, match):
    """`universal` as in config.json and on the command line: `enabled` plus the fields."""
    with pytest.raises(ValueError, match=re.escape(match)):
        ModelConfig.from_dict({"universal": fields})


@pytest.mark.parametrize("cfg", [TINY, ACT], ids=["fixed_steps", "act"])
def test_each_step_reads_the_state_plus_position_and_step_signals(cfg):
    """The coordinate embedding (Dehghani et al. 2019, §2.1): before step t the block reads the
    state the previous step left plus P, the sinusoidal signal of each position, plus S_t, row t
    of a sinusoidal table over the steps: the same P at every step, a different S_t."""
    assert cfg.positional.kind == "sinusoidal"
    params = build_model(cfg).init(jax.random.PRNGKey(0), IDS)["params"]
    _, state = apply(cfg, {"params": params})
    recurrence = state["intermediates"]["decoder"]["recurrence"]
    inputs_UBTD = np.asarray(recurrence["block_inputs"][0])
    states_UBTD = np.asarray(recurrence["step_states"][0])
    num_steps, _, length, d_model = inputs_UBTD.shape
    assert num_steps == cfg.universal.steps
    p_TD = sinusoidal_table(length, d_model)
    s_UD = sinusoidal_table(num_steps + 1, d_model)[1:]
    for t in range(1, num_steps):  # step t + 1 reads what step t left
        coordinates_BTD = inputs_UBTD[t] - states_UBTD[t - 1]
        np.testing.assert_allclose(
            coordinates_BTD, np.broadcast_to(p_TD + s_UD[t], coordinates_BTD.shape), atol=1e-5
        )


def step_signal_rows(cfg, params, stack="decoder") -> np.ndarray:
    """The (T, D) step signal each step t = 1..T adds, read from the model as in the test
    above: block input minus the state it was given, minus the (step-independent) positions."""
    _, state = apply(cfg, {"params": params})
    recurrence = state["intermediates"][stack]["recurrence"]
    inputs_UBTD = np.asarray(recurrence["block_inputs"][0])
    states_UBTD = np.asarray(recurrence["step_states"][0])
    num_steps, _, length, d_model = inputs_UBTD.shape
    p_TD = sinusoidal_table(length, d_model)
    rows = [inputs_UBTD[t] - states_UBTD[t - 1] - p_TD for t in range(1, num_steps)]
    return np.stack([row[0, 0] for row in rows])  # the same for every position: take one


def test_learned_step_signal_is_read_at_rows_1_to_T():
    """model.universal.step_signal="learned" (tensor2tensor's default): a learned (T + 1, D)
    table read at rows 1..T, as the sinusoidal one, scaled by sqrt(D) as tensor2tensor's
    get_layer_timing_signal_learned_1d; switching signals adds that table and nothing else."""
    learned = TINY.override({"universal.step_signal": "learned"})
    params = build_model(learned).init(jax.random.PRNGKey(0), IDS)["params"]
    table_SD = np.asarray(params["decoder"]["step_embedding"])
    num_steps, d_model = learned.universal.steps, learned.d_model
    assert table_SD.shape == (num_steps + 1, d_model)
    # Initialised at unit scale after the sqrt(D) factor, as tensor2tensor's.
    assert 0.7 < float(np.std(table_SD * d_model**0.5)) < 1.3
    rows = step_signal_rows(learned, params)  # steps 2..T
    np.testing.assert_allclose(rows, table_SD[2:] * d_model**0.5, atol=1e-5)
    # A table with another row 0 gives the same model: row 0 is never read.
    params_row0 = jax.tree.map(lambda x: x, params)
    params_row0["decoder"]["step_embedding"] = params["decoder"]["step_embedding"].at[0].set(9.0)
    np.testing.assert_array_equal(
        apply(learned, {"params": params_row0})[0], apply(learned, {"params": params})[0]
    )
    # The sinusoidal model with the same block parameters reads the sinusoidal rows 1..T.
    sinusoidal_params = {k: v for k, v in params["decoder"].items() if k != "step_embedding"}
    sinusoidal_params = {**params, "decoder": sinusoidal_params}
    np.testing.assert_allclose(
        step_signal_rows(TINY, sinusoidal_params),
        sinusoidal_table(num_steps + 1, d_model)[2:],
        atol=1e-5,
    )


def test_step_offset_redraws_the_position_offset_at_every_step():
    """train_positions="step_offset": before step u the block reads positions o_u, o_u + 1, ...
    with o_u = step_offsets(key)[u] in [0, T), one per batch and a new one per step
    (tensor2tensor's add_position_timing_signal in every step_preprocess)."""
    cfg = TINY.override(
        {"positional.train_positions": "step_offset", "positional.max_len": 16, "dropout_rate": 0.0}
    )
    params = build_model(cfg).init(jax.random.PRNGKey(0), IDS)["params"]
    length = IDS.shape[1]
    table_LD = sinusoidal_table(16, cfg.d_model)
    s_UD = sinusoidal_table(cfg.universal.steps + 1, cfg.d_model)[1:]
    seen = set()
    for seed in range(4):
        key = jax.random.PRNGKey(seed)
        _, state = build_model(cfg).apply(
            {"params": params},
            IDS,
            train=True,
            rngs={"positions": key, "dropout": key},
            mutable=["intermediates"],
        )
        recurrence = state["intermediates"]["decoder"]["recurrence"]
        inputs_UBTD = np.asarray(recurrence["block_inputs"][0])
        states_UBTD = np.asarray(recurrence["step_states"][0])
        offsets = []  # the offsets of steps 2..T, found by matching the table's rows
        for u in range(1, cfg.universal.steps):
            position_BTD = inputs_UBTD[u] - states_UBTD[u - 1] - s_UD[u]
            matches = [
                o
                for o in range(16 - length + 1)
                if np.allclose(position_BTD, table_LD[o : o + length][None], atol=1e-4)
            ]
            assert len(matches) == 1 and matches[0] < length  # one offset for the batch
            offsets.append(matches[0])
        seen.add(tuple(offsets))
    assert any(len(set(o)) > 1 for o in seen)  # redrawn between steps
    assert len(seen) > 1  # and between batches
