"""The layer loop of a stack: unrolled or one `nn.scan`, with optional rematerialisation.

Unrolled, layer i is a `Block` named layer_i and XLA compiles every layer separately, so compile
time grows with depth. With `model.scan_layers` the N identical blocks become one `nn.scan`
(as in MaxText and big_vision): one compiled layer body, parameters stacked along a leading
axis of size N under the name "layers" (so `layers/ffn/...` has shape (N, ...) where the
unrolled tree has `layer_0/ffn/...`, `layer_1/ffn/...`). `stack_layers` and `unstack_layers`
convert between the two layouts; the math is the same either way.

`model.remat` trades compute for memory in the backward pass (Chen et al. 2016, "Training Deep
Nets with Sublinear Memory Cost"): "none" keeps every activation, "full" keeps only each layer's
input and recomputes the rest, "dots_saveable" keeps matmul outputs and recomputes the cheap
element-wise work (`jax.checkpoint_policies.dots_saveable`).
"""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax.config import ModelConfig
from transformer_jax.models.blocks import Block, BlockContext

SCANNED = "layers"
_LAYER = re.compile(r"layer_(\d+)$")
# Collections with one entry per layer: stacked along axis 0 by the scan.
_PER_LAYER = ("params", "batch_stats", "intermediates", "diagnostics")
_POLICIES = {"full": None, "dots_saveable": jax.checkpoint_policies.dots_saveable}


class _LayerStep(Block):
    """A Block as a scan body: (x, context) -> (x, None), `train` fixed as an attribute."""

    train: bool = False

    def __call__(self, x_BTD, context: BlockContext):
        return Block.__call__(self, x_BTD, context, train=self.train), None


def apply_layers(
    cfg: ModelConfig,
    num_layers: int,
    x_BTD,
    context: BlockContext,
    *,
    cross_attention: bool,
    use_cache: bool,
    train: bool,
    causal: bool = False,
):
    """(B, T, D) -> (B, T, D) through `num_layers` blocks; call from a compact module.

    `causal`: the self-attention mask hides every later key (see MultiHeadAttention)."""
    step = _LayerStep
    if cfg.remat != "none":
        # Inside a scan the loop boundary already stops XLA from merging recomputation back
        # into the forward pass, so CSE prevention is only needed unrolled (flax's advice).
        step = nn.remat(step, policy=_POLICIES[cfg.remat], prevent_cse=not cfg.scan_layers)
    if not cfg.scan_layers:
        for i in range(num_layers):
            x_BTD, _ = step(
                cfg,
                cross_attention=cross_attention,
                use_cache=use_cache,
                causal=causal,
                train=train,
                name=f"layer_{i}",
            )(x_BTD, context)
        return x_BTD
    if use_cache:
        raise ValueError(
            "model.scan_layers=True does not support the KV cache (use_cache=True) used for "
            "decoding; decode with model.scan_layers=False and parameters converted by "
            "transformer_jax.models.scan.unstack_layers"
        )
    scanned = nn.scan(
        step,
        variable_axes=dict.fromkeys(_PER_LAYER, 0),
        split_rngs={"params": True, "dropout": True},
        in_axes=nn.broadcast,
        length=num_layers,
    )
    layers = scanned(cfg, cross_attention=cross_attention, causal=causal, train=train, name=SCANNED)
    x_BTD, _ = layers(x_BTD, context)
    return x_BTD


def stack_layers(tree):
    """Unrolled layout -> scanned: every dict holding layer_0 .. layer_{N-1} gets them stacked
    (leaves (N, ...)) under "layers". Works on params, batch_stats or a whole variables dict."""
    if not isinstance(tree, dict):
        return tree
    layers = {k: v for k, v in tree.items() if _LAYER.match(k)}
    out = {k: stack_layers(v) for k, v in tree.items() if k not in layers}
    if layers:
        ordered = [layers[f"layer_{i}"] for i in range(len(layers))]
        out[SCANNED] = jax.tree.map(lambda *xs: jnp.stack(xs), *ordered)
    return out


def unstack_layers(tree):
    """Scanned layout -> unrolled: the inverse of `stack_layers`."""
    if not isinstance(tree, dict):
        return tree
    out = {k: unstack_layers(v) for k, v in tree.items() if k != SCANNED}
    if SCANNED in tree:
        num_layers = jax.tree.leaves(tree[SCANNED])[0].shape[0]
        for i in range(num_layers):
            out[f"layer_{i}"] = jax.tree.map(lambda x, i=i: x[i], tree[SCANNED])
    return out
