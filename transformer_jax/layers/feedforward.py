"""Position-wise feed-forward network (Vaswani §3.3; NTHU slide 40)."""

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.config import ModelConfig


class FeedForward(nn.Module):
    """relu / gelu: W_2 act(W_1 x). swiglu: W_2 (silu(W_1 x) * W_3 x) (Shazeer 2020).

    (B, T, D) -> (B, T, D) through a hidden width of d_ff.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, x_BTD, *, train: bool = False):
        del train
        cfg = self.config
        dense = lambda features, name: nn.Dense(  # noqa: E731
            features, dtype=jnp.dtype(cfg.dtype), param_dtype=jnp.float32, name=name
        )
        match cfg.activation:
            case "relu":
                h_BTF = nn.relu(dense(cfg.d_ff, "wi")(x_BTD))
            case "gelu":
                h_BTF = nn.gelu(dense(cfg.d_ff, "wi")(x_BTD))
            case "swiglu":
                h_BTF = nn.silu(dense(cfg.d_ff, "wi")(x_BTD)) * dense(cfg.d_ff, "wg")(x_BTD)
            case _:
                raise ValueError(f"model.activation={cfg.activation!r} is not valid")
        return dense(x_BTD.shape[-1], "wo")(h_BTF)
