"""Position-wise feed-forward network (Vaswani §3.3; NTHU slide 40).

`ACTIVATIONS` maps `model.ffn.activation` to (function, gated): a plain activation computes
W_2 act(W_1 x); a gated one (GLU variants, Shazeer 2020) W_2 (act(W_1 x) * W_3 x). A new
activation is one registered entry here.
"""

import dataclasses
import functools
from typing import ClassVar, NamedTuple

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax import fields as F
from transformer_jax.registry import Registry


class Activation(NamedTuple):
    fn: object  # elementwise jnp function
    gated: bool  # multiply by a second projection W_3 x (a GLU variant)


ACTIVATIONS: Registry[Activation] = Registry("model.ffn.activation")
ACTIVATIONS.add("relu", Activation(nn.relu, gated=False))
# "gelu" is the tanh approximation of x Phi(x) (jax.nn.gelu's default; BERT and GPT-2 compute
# it), "gelu_exact" the erf form of Hendrycks & Gimpel 2016; they differ by up to ~5e-4.
ACTIVATIONS.add("gelu", Activation(nn.gelu, gated=False))
_gelu_erf = functools.partial(nn.gelu, approximate=False)
ACTIVATIONS.add("gelu_exact", Activation(_gelu_erf, gated=False))
# SiLU/swish x sigmoid(x) without a gate: Marian's activation_function="swish" (transformers
# activations.py ACT2CLS "swish": nn.SiLU); swiglu is the same function gated (Shazeer 2020).
ACTIVATIONS.add("silu", Activation(nn.silu, gated=False))
ACTIVATIONS.add("swiglu", Activation(nn.silu, gated=True))


@dataclasses.dataclass(frozen=True)
class FeedForwardConfig:
    """The position-wise feed-forward network (Vaswani §3.3)."""

    PREFIX: ClassVar[str] = "model.ffn"

    activation: str = "relu"  # relu | gelu (tanh approx.) | gelu_exact | silu | swiglu
    d_ff: int = 512  # hidden width
    # On the hidden activations (tensor2tensor's relu_dropout; 0.1 in transformer_base_v2).
    dropout_rate: float = 0.0
    use_bias: bool = True  # biases of W_1, W_3 and W_2 (False: Llama's mlp_bias=False)

    def __post_init__(self):
        F.check_choice(f"{self.PREFIX}.activation", self.activation, ACTIVATIONS.names())
        F.check_int(f"{self.PREFIX}.d_ff", self.d_ff, 1)
        F.check_float(f"{self.PREFIX}.dropout_rate", self.dropout_rate, at_least=0.0, below=1.0)
        F.check_bool(f"{self.PREFIX}.use_bias", self.use_bias)


class FeedForward(nn.Module):
    """(B, T, D) -> (B, T, D) through a hidden width of d_ff."""

    config: FeedForwardConfig
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x_BTD, *, train: bool = False):
        activation = ACTIVATIONS[self.config.activation]

        def dense(features, name):
            return nn.Dense(
                features,
                use_bias=self.config.use_bias,
                dtype=jnp.dtype(self.dtype),
                param_dtype=jnp.float32,
                name=name,
            )

        h_BTF = activation.fn(dense(self.config.d_ff, "wi")(x_BTD))
        if activation.gated:
            h_BTF = h_BTF * dense(self.config.d_ff, "wg")(x_BTD)
        if self.config.dropout_rate:  # tensor2tensor's relu_dropout, on the hidden units
            h_BTF = nn.Dropout(self.config.dropout_rate)(h_BTF, deterministic=not train)
        return dense(x_BTD.shape[-1], "wo")(h_BTF)
