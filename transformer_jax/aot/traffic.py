"""An analytic count of a train step's HBM traffic, beside XLA's bytes accessed.

XLA's cost analysis counts the bytes every fused operation of the compiled program reads and
writes; nothing checks it. This counts, from the model's config and the train state's sizes,
the traffic a step cannot avoid, per chip:

- weights: the parameters read by the forward pass and again by the backward pass (a third time
  with `model.remat="full"`, whose backward pass recomputes the forward);
- gradients: written by the backward pass, read by the optimizer update;
- optimizer: the update reads and writes the parameters and the optimizer state (with
  `train.fsdp = f`, each chip updates its 1/f share);
- activations: what the forward pass saves for the backward pass, written once and read once.

Weights and gradients move once per micro-batch (`train.grad_accum_steps`), the update once.
Saved activations follow Korthikanti et al. 2022 §4.1 (docs/papers.md) per token and layer, in
the compute dtype: a self-attention sublayer saves its norm's input and output, Q, K, V and the
context (the output projection's input), and the attention probabilities (float32, one per head
and key: the softmax runs in float32); cross-attention the same with the encoder's K and V per
source token; a feed-forward sublayer its norm's input and output, the hidden pre-activation
(two with a gated activation) and the activation's output. The stack's final norm saves its
input and output, the output layer the float32 logits. Left out: dropout masks, norm
statistics, biases, the metrics' norms, and the temporaries between saved tensors (attention's
logits and their gradients, chains of elementwise work between fusions), which XLA's count
includes; `remat="dots_saveable"` is counted as no remat (an overstatement), `"full"` as the
layer inputs alone. It is a floor of what a step moves, not a prediction of XLA's figure.
"""

import dataclasses

import jax
import numpy as np

from transformer_jax.config import ModelConfig
from transformer_jax.families import family_of
from transformer_jax.layers.feedforward import ACTIVATIONS

_FLOAT32 = 4


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Bytes per chip of one train step, by what moves them (see the module docstring)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations


@dataclasses.dataclass(frozen=True)
class Stack:
    """`layers` layers over `tokens` tokens per row, self-attending over `tokens` keys (and with
    `source` > 0, cross-attending over `source` encoder tokens)."""

    layers: int
    tokens: int
    source: int = 0


def tree_bytes(tree) -> int:
    """Bytes of the arrays (or ShapeDtypeStructs) of a pytree."""
    return int(sum(np.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


def stacks(cfg: ModelConfig, input_len: int, target_len: int) -> list[Stack]:
    """The model's layer stacks over one row: (input_len, target_len) tokens of the batch."""
    family = family_of(cfg)
    steps = cfg.universal.num_steps if cfg.universal is not None else lambda layers: layers
    encoder_layers, decoder_layers = steps(cfg.num_encoder_layers), steps(cfg.num_decoder_layers)
    if family.reads_images or family.classifier:
        length = cfg.vit.num_patches if family.reads_images else input_len
        length += cfg.pooling == "cls"  # the class token
        return [Stack(encoder_layers, length)]
    if family.decodes == "source":
        return [Stack(encoder_layers, input_len), Stack(decoder_layers, target_len, input_len)]
    return [Stack(decoder_layers, target_len)]


def activation_bytes(cfg: ModelConfig, input_len: int, target_len: int) -> int:
    """Bytes the forward pass saves for the backward pass, per row (see the module docstring)."""
    family = family_of(cfg)
    compute = np.dtype(cfg.dtype).itemsize
    d, heads = cfg.d_model, cfg.attention.num_heads
    inner = heads * cfg.head_dim
    kv = (cfg.attention.num_kv_heads or heads) * cfg.head_dim
    gated = ACTIVATIONS[cfg.ffn.activation].gated
    ffn = 2 * d + (2 + gated) * cfg.ffn.d_ff
    total = 0
    for stack in stacks(cfg, input_len, target_len):
        if cfg.remat == "full":  # the backward pass recomputes each layer from its input
            total += stack.layers * stack.tokens * d * compute
            continue
        per_token = (2 * d + 2 * inner + 2 * kv + ffn) * compute + heads * stack.tokens * _FLOAT32
        per_row = per_token * stack.tokens
        if stack.source:  # cross-attention: Q, context, norm, probabilities; K, V per source
            cross = (2 * d + 2 * inner) * compute + heads * stack.source * _FLOAT32
            per_row += stack.tokens * cross + stack.source * 2 * kv * compute
        total += stack.layers * per_row
    last = stacks(cfg, input_len, target_len)[-1]
    if family.classifier:
        total += 2 * d * last.tokens * compute + cfg.num_classes * _FLOAT32
        if family.reads_images:  # the patch embedding's input
            total += cfg.vit.image_size**2 * cfg.vit.num_channels * compute
        return total
    return total + last.tokens * (2 * d * compute + cfg.vocab_size * _FLOAT32)


def train_step_traffic(
    cfg: ModelConfig,
    *,
    rows: int,
    lengths: tuple[int, int],
    param_bytes: int,
    optimizer_bytes: int,
    fsdp: int = 1,
    grad_accum_steps: int = 1,
) -> Traffic:
    """The step's traffic per chip: `rows` rows per chip (all micro-batches) of `lengths`
    (inputs, targets) tokens, parameters and optimizer state of `param_bytes` and
    `optimizer_bytes` in all, split `fsdp` ways for the update."""
    passes = 3 if cfg.remat == "full" else 2
    k = grad_accum_steps
    return Traffic(
        weights=k * passes * param_bytes,
        gradients=k * 2 * param_bytes,
        optimizer=2 * (param_bytes + optimizer_bytes) / fsdp,
        activations=2 * rows * activation_bytes(cfg, *lengths),
    )
