"""Normalization layers for Add & Norm (NCCU slides 57-63): one registry, one call signature.

Every norm is called as `norm(x, train=...)`; only BatchNorm uses `train` (batch statistics in
training, running averages, kept in the "batch_stats" collection, in evaluation). `NORMS` maps
`model.norm.kind` to a factory `(NormConfig, name) -> module`; a new norm is a module and one
registered factory here.
"""

import dataclasses
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax import fields as F
from transformer_jax.registry import Registry


@dataclasses.dataclass(frozen=True)
class NormConfig:
    """Add & Norm (NCCU slides 57-63): which norm, where, and whether there is a residual."""

    PREFIX: ClassVar[str] = "model.norm"

    kind: str = "layernorm"  # layernorm | rmsnorm | dyt | batchnorm | none
    position: str = "post"  # post: Norm(x + F(x)) (the paper); pre: x + F(Norm(x))
    epsilon: float = 1e-6
    dyt_alpha_init: float = 0.5  # DyT's scalar alpha at initialisation (Zhu et al. 2025)
    dyt_learnable_alpha: bool = True  # False: alpha stays at dyt_alpha_init (their ablation)
    residual: bool = True  # False removes every residual connection (NCCU ablation)
    # layernorm and batchnorm: var = E[x^2] - E[x]^2 (flax's fast variance, the default) or
    # E[(x - E[x])^2] (torch's). The fast form loses float32 precision when the features share
    # a large offset (tests/layers/test_norms.py measures it against float64).
    fast_variance: bool = True

    def __post_init__(self):
        p = self.PREFIX
        F.check_choice(f"{p}.kind", self.kind, NORMS.names())
        F.check_choice(f"{p}.position", self.position, ("post", "pre"))
        F.check_float(f"{p}.epsilon", self.epsilon, above=0.0)
        F.check_float(f"{p}.dyt_alpha_init", self.dyt_alpha_init)
        F.check_bool(f"{p}.dyt_learnable_alpha", self.dyt_learnable_alpha)
        F.check_bool(f"{p}.residual", self.residual)
        F.check_bool(f"{p}.fast_variance", self.fast_variance)
        if not self.fast_variance and self.kind not in VARIANCE_NORMS:
            raise ValueError(
                f"{p}.fast_variance=False has no effect with {p}.kind={self.kind!r} (it computes "
                f"no variance); valid: fast_variance=True, or kind one of {list(VARIANCE_NORMS)}"
            )


VARIANCE_NORMS = ("layernorm", "batchnorm")  # the norms that read norm.fast_variance


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * gamma + beta over features (Ba et al. 2016).

    `fast_variance`: var as E[x^2] - E[x]^2 (flax's default) or as E[(x - mean)^2], as
    torch.nn.LayerNorm computes it."""

    epsilon: float = 1e-6
    fast_variance: bool = True

    @nn.compact
    def __call__(self, x, *, train: bool = False):
        del train
        norm = nn.LayerNorm(
            epsilon=self.epsilon,
            dtype=jnp.float32,
            use_fast_variance=self.fast_variance,
            name="norm",
        )
        return norm(x).astype(x.dtype)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * gamma, no mean subtraction (Zhang & Sennrich 2019)."""

    epsilon: float = 1e-6

    @nn.compact
    def __call__(self, x, *, train: bool = False):
        del train
        return nn.RMSNorm(epsilon=self.epsilon, dtype=jnp.float32, name="norm")(x).astype(x.dtype)


class DyT(nn.Module):
    """Dynamic Tanh, gamma * tanh(alpha * x) + beta, scalar learnable alpha (Zhu et al. 2025).

    With `learnable_alpha=False` alpha is the constant `alpha_init` and not a parameter: the
    paper's ablation (ViT-B accuracy 82.5 -> 81.1).
    """

    alpha_init: float = 0.5
    learnable_alpha: bool = True

    @nn.compact
    def __call__(self, x, *, train: bool = False):
        del train
        features = x.shape[-1]
        if self.learnable_alpha:
            alpha = self.param("alpha", nn.initializers.constant(self.alpha_init), (), jnp.float32)
        else:
            alpha = jnp.float32(self.alpha_init)
        gamma = self.param("scale", nn.initializers.ones, (features,), jnp.float32)
        beta = self.param("bias", nn.initializers.zeros, (features,), jnp.float32)
        features_shape = (1,) * (x.ndim - 1) + (features,)
        y = gamma.reshape(features_shape) * jnp.tanh(alpha * x.astype(jnp.float32))
        return (y + beta.reshape(features_shape)).astype(x.dtype)


class BatchNorm(nn.Module):
    """Normalizes each feature over the batch and length axes (Ioffe & Szegedy 2015).

    Padding positions are included in the statistics, as in a naive port to text: the lectures'
    reason why Transformers use LayerNorm instead (NTHU slide 39).
    """

    epsilon: float = 1e-5
    momentum: float = 0.9
    fast_variance: bool = True  # as LayerNorm's

    @nn.compact
    def __call__(self, x, *, train: bool = False):
        # flax's BatchNorm broadcasts (C,) statistics against (B, T, C) implicitly.
        with jax.numpy_rank_promotion("allow"):
            return self._batch_norm(x, train)

    def _batch_norm(self, x, train):
        return nn.BatchNorm(
            use_running_average=not train,
            momentum=self.momentum,
            epsilon=self.epsilon,
            dtype=jnp.float32,
            use_fast_variance=self.fast_variance,
            name="norm",
        )(x).astype(x.dtype)


class Identity(nn.Module):
    """`norm=none`: no normalization at all."""

    @nn.compact
    def __call__(self, x, *, train: bool = False):
        del train
        return x


NORMS: Registry = Registry("model.norm.kind")
NORMS.add(
    "layernorm", lambda config, name: LayerNorm(config.epsilon, config.fast_variance, name=name)
)
NORMS.add("rmsnorm", lambda config, name: RMSNorm(config.epsilon, name=name))
NORMS.add(
    "dyt", lambda config, name: DyT(config.dyt_alpha_init, config.dyt_learnable_alpha, name=name)
)
NORMS.add(
    "batchnorm", lambda config, name: BatchNorm(fast_variance=config.fast_variance, name=name)
)
NORMS.add("none", lambda config, name: Identity(name=name))


def make_norm(config: NormConfig, name: str | None = None) -> nn.Module:
    """The norm layer named by `config.kind`."""
    return NORMS[config.kind](config, name)
