"""An encoder-only classifier: a bidirectional stack, pooled, then a linear head."""

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.config import ModelConfig
from transformer_jax.layers.embedding import token_embedding
from transformer_jax.models.stack import default_positions
from transformer_jax.models.universal import stack_class


def pool(x_BTD, valid_BT, method: str):
    """`cls`: the state of the first (class) token; `mean`: the mean over real tokens. -> (B, D)."""
    if method == "cls":
        return x_BTD[:, 0]
    if method == "mean":
        weights_BT1 = valid_BT[..., None].astype(x_BTD.dtype)
        return (x_BTD * weights_BT1).sum(1) / jnp.maximum(weights_BT1.sum(1), 1)
    raise ValueError(f"model.pooling={method!r} is not valid; choose one of ['cls', 'mean']")


class EncoderClassifier(nn.Module):
    """(B, T) token ids -> (B, num_classes) float32 logits.

    With `pooling="cls"` a learned class token is prepended, as in BERT and ViT; it occupies
    position 0, so inputs may be at most max_len - 1 long.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, ids_BT, *, valid_BT=None, train: bool = False):
        """`valid_BT`: the tokens that are not padding (default: `model.tokens.valid`)."""
        cfg = self.config
        x_BTD = token_embedding(cfg, name="embedding").encode(ids_BT)
        if valid_BT is None:
            valid_BT = cfg.tokens.valid(ids_BT)
        if cfg.pooling == "cls":
            cls_11D = self.param("cls", nn.initializers.zeros, (1, 1, cfg.d_model), jnp.float32)
            cls_B1D = jnp.broadcast_to(cls_11D, (x_BTD.shape[0], 1, cfg.d_model))
            x_BTD = jnp.concatenate([cls_B1D.astype(x_BTD.dtype), x_BTD], axis=1)
            valid_BT = jnp.pad(valid_BT, ((0, 0), (1, 0)), constant_values=True)
        x_BTD = stack_class(cfg)(cfg, cfg.num_encoder_layers, causal=False, name="encoder")(
            x_BTD, positions_BT=default_positions(valid_BT), valid_BT=valid_BT, train=train
        )
        pooled_BD = pool(x_BTD, valid_BT, cfg.pooling)
        return nn.Dense(cfg.num_classes, dtype=jnp.float32, name="head")(pooled_BD)
