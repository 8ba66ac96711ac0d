"""Every hook of a positional encoding is reached through the path that declares it: a probe
encoding, registered for these tests only, gives each hook an effect that can be seen from
outside (a parameter, a rejected config, attention weights), so the models and the config must
call the hooks rather than compare `kind` strings."""

import dataclasses
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict
from tiny_configs import tiny_model

from transformer_jax.config import PositionalConfig, ViTConfig
from transformer_jax.decoding.api import DecodeConfig, resolve_max_new_tokens
from transformer_jax.layers import positional
from transformer_jax.models import build_model

PROBE = "probe"
BIAS = 1e4  # on the diagonal of self-attention: every query attends to itself only


@dataclasses.dataclass(frozen=True)
class Probe(positional.PositionalEncoding):
    """A visible effect per hook: a learned table, zeroed q and k, a learned bias that pins
    self-attention to the diagonal, a learned grid, and a rejected d_model."""

    limited_to_table: ClassVar[bool] = True
    train_positions: ClassVar[tuple[str, ...]] = ("plain", "offset")

    def check(self, model_config):
        if model_config.d_model == 24:
            raise ValueError("the probe rejects d_model=24")

    def embed(self, x_BTD, pos_BT):
        table = nn.Embed(self.config.max_len, x_BTD.shape[-1], name="probe_table")
        return x_BTD + table(pos_BT)

    def rotate(self, x_BTNH, pos_BT):
        del pos_BT
        return jnp.zeros_like(x_BTNH)  # every self-attention logit 0, before the bias

    def logit_bias(self, module, q_pos_BT, k_pos_BS, num_heads, *, causal):
        del causal
        scale_N = module.param("probe_bias", nn.initializers.ones, (num_heads,), jnp.float32)
        same_BTS = q_pos_BT[:, :, None] == k_pos_BS[:, None, :]
        return BIAS * scale_N[None, :, None, None] * same_BTS[:, None].astype(jnp.float32)

    def grid_signal(self, module, grid_size, d_model, cls_token):
        shape = (grid_size**2 + cls_token, d_model)
        return module.param("probe_grid", nn.initializers.normal(0.02), shape, jnp.float32)


@pytest.fixture(autouse=True)
def probe_registered(monkeypatch):
    """ENCODINGS with the probe added for one test, then as it was."""
    monkeypatch.setitem(positional.ENCODINGS._entries, PROBE, Probe)


def _params(config, *args):
    model = build_model(config)
    return model, model.init(jax.random.PRNGKey(0), *args)


def _paths(tree) -> list[str]:
    return ["/".join(path) for path in flatten_dict(tree)]


def test_check_hook_rejects_configs_at_construction():
    with pytest.raises(ValueError, match="the probe rejects d_model=24"):
        tiny_model("decoder_only", {"positional.kind": PROBE}, d_model=24)
    assert tiny_model("decoder_only", {"positional.kind": PROBE}, d_model=32).d_model == 32


def test_train_positions_hook_limits_the_schemes():
    assert PositionalConfig(kind=PROBE, train_positions="offset").train_positions == "offset"
    with pytest.raises(ValueError, match=r"valid for 'probe': \['plain', 'offset'\]"):
        PositionalConfig(kind=PROBE, train_positions="randomized")


def test_sinusoidal_check_hook_rejects_an_odd_vit_width():
    """The ViT's 2-D sin-cos table splits d_model between rows and columns: the encoding's own
    check says so, for the vit family only (a 1-D table of odd width is fine)."""
    vit = ViTConfig(image_size=4, num_channels=1, patch_size=2)
    odd = {"d_model": 15, "num_classes": 3, "attention.num_heads": 3}
    with pytest.raises(ValueError, match="model.d_model=15 must be even for a vit"):
        tiny_model("vit", odd, vit=vit)
    assert tiny_model("vit", {**odd, "positional.kind": "learned"}, vit=vit).d_model == 15
    assert tiny_model("encoder_classifier", odd).positional.kind == "sinusoidal"


@pytest.mark.parametrize("universal", [False, True], ids=["stack", "universal"])
def test_embed_and_logit_bias_hooks_reach_every_stack(universal):
    """embed adds its table, and logit_bias gets the stack as a module that holds a parameter
    (how a learned relative bias would live), in the encoder and the decoder alike."""
    config = tiny_model(
        "encoder_decoder", {"positional.kind": PROBE, "universal.enabled": universal}
    )
    tokens_BT = jnp.ones((1, 5), jnp.int32)
    model, variables = _params(config, tokens_BT, tokens_BT)
    paths = _paths(variables["params"])
    for stack in ("encoder", "decoder"):
        assert [p for p in paths if p.startswith(stack) and "probe_table" in p], (stack, paths)
        assert f"{stack}/probe_bias" in paths, (stack, paths)

    # The bias is used, and learnable: the output's gradient reaches it. Scaled down to a
    # diagonal logit of 1 first, where the softmax is not saturated.
    params = jax.tree.map(lambda x: x, variables["params"])
    params["decoder"]["probe_bias"] = jnp.full((2,), 1.0 / BIAS)

    def total(params):
        return model.apply({"params": params}, tokens_BT, tokens_BT).sum()

    grads = flatten_dict(jax.jit(jax.grad(total))(params), sep="/")  # jitted: one compile
    assert np.all(np.abs(np.asarray(grads["decoder/probe_bias"])) > 0)


def test_rotate_hook_acts_in_self_attention_only():
    """rotate zeroes q and k, so self-attention weights come from the logit bias alone (the
    diagonal); cross-attention is never rotated and keeps its content-based weights."""
    config = tiny_model("encoder_decoder", {"positional.kind": PROBE})
    rng = np.random.default_rng(0)
    inputs_BS = jnp.asarray(rng.integers(3, 13, (2, 5)), jnp.int32)
    targets_BT = jnp.asarray(rng.integers(3, 13, (2, 4)), jnp.int32)
    model, variables = _params(config, inputs_BS, targets_BT)
    _, state = model.apply(variables, inputs_BS, targets_BT, mutable=["intermediates"])
    weights = {
        k: np.asarray(v[0]) for k, v in flatten_dict(state["intermediates"], sep="/").items()
    }
    self_weights = [w for k, w in weights.items() if "self_attention" in k]
    cross_weights = [w for k, w in weights.items() if "cross_attention" in k]
    assert len(self_weights) == 3 and len(cross_weights) == 2  # 1 encoder, 2 decoder layers
    for w_BNTS in self_weights:
        eye = np.broadcast_to(np.eye(w_BNTS.shape[-1]), w_BNTS.shape)
        np.testing.assert_allclose(w_BNTS, eye, atol=1e-6)
    for w_BNTS in cross_weights:
        assert not np.allclose(w_BNTS, 1.0 / w_BNTS.shape[-1], atol=1e-3)


def test_grid_signal_hook_replaces_the_1d_hooks_in_a_vit():
    """A ViT adds the encoding's grid signal (held by the ViT) and its stack sees no positions:
    neither the 1-D table nor the bias is built there."""
    vit = ViTConfig(image_size=4, num_channels=1, patch_size=2)
    config = tiny_model(
        "vit", {"positional.kind": PROBE, "positional.max_len": 5}, num_classes=3, vit=vit
    )
    _, variables = _params(config, jnp.zeros((1, 4, 4, 1)))
    paths = _paths(variables["params"])
    assert "probe_grid" in paths
    assert not [p for p in paths if "probe_table" in p or "probe_bias" in p], paths


def test_limited_to_table_hook_bounds_inputs_and_decoding():
    config = tiny_model("decoder_only", {"positional.kind": PROBE})  # max_len 8
    model, variables = _params(config, jnp.ones((1, 8), jnp.int32))
    with pytest.raises(ValueError, match="more than model.positional.max_len=8"):
        model.apply(variables, jnp.ones((1, 9), jnp.int32))
    # Decoding stops below the table: a 3-token prompt leaves 5 positions.
    assert resolve_max_new_tokens(config, DecodeConfig(), input_len=3) == 5
    unlimited = config.override({"positional.kind": "none"})
    assert resolve_max_new_tokens(unlimited, DecodeConfig(), input_len=3) > 5
