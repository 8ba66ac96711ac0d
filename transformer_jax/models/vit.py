"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

An image is cut into non-overlapping p x p patches, each flattened and linearly projected to
d_model (the paper's Eq. 1), read in row-major order as a sequence of M = (Y/p)^2 tokens; a
class token is prepended (`pooling="cls"`) or the states are averaged (`pooling="mean"`, the
paper's "GAP" variant); then the same encoder stack as the text models and a linear head.

Positions (`model.positional.kind`): an encoding with a `grid_signal` hook adds it here, over
the 2-D patch grid (learned: one vector per patch and one for the class token, the paper's
default; sinusoidal: fixed 2-D sin-cos, rows then columns, as MAE and big_vision do); the others
act in the stack on the flattened row-major index (class token 0, patches 1..M; without a class
token patches 0..M-1), so vertical neighbours are Y/p positions apart: a 1-D stand-in, not a
2-D method. `none`: the encoder is equivariant to permutations of the patches.
"""

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.config import ModelConfig
from transformer_jax.layers.positional import encoding
from transformer_jax.models.classifier import pool
from transformer_jax.models.stack import default_positions
from transformer_jax.models.universal import stack_class


def patchify(images_BYXC: jnp.ndarray, patch_size: int) -> jnp.ndarray:
    """(B, Y, X, C) -> (B, M, Q), patches in row-major order, each flattened as (p, p, C).

    p = patch_size; M = (Y/p) * (X/p) patches of Q = p*p*C values; Y and X must be multiples
    of p (lower-case y, x below: the patch grid's rows and columns).
    """
    b, h, w, c = images_BYXC.shape
    p = patch_size
    x_BypxpC = images_BYXC.reshape(b, h // p, p, w // p, p, c)
    x_ByxppC = x_BypxpC.transpose(0, 1, 3, 2, 4, 5)
    return x_ByxppC.reshape(b, (h // p) * (w // p), p * p * c)


def unpatchify(patches_BMQ: jnp.ndarray, patch_size: int, height: int, width: int) -> jnp.ndarray:
    """The inverse of `patchify`: (B, M, Q) -> (B, Y, X, C)."""
    b, _, k = patches_BMQ.shape
    p = patch_size
    c = k // (p * p)
    x_ByxppC = patches_BMQ.reshape(b, height // p, width // p, p, p, c)
    return x_ByxppC.transpose(0, 1, 3, 2, 4, 5).reshape(b, height, width, c)


class ViT(nn.Module):
    """(B, Y, X, C) float images (Y = X) -> (B, num_classes) float32 logits.

    `encode` returns the encoder states (B, T, D), T = M (+1 with a class token first).
    The head is zero-initialised (big_vision's default), so training starts from uniform
    predictions; there is no pre-logits layer (the paper uses one for pre-training only).
    Patch embeddings are not multiplied by sqrt(d_model): `embeddings.scale` is for token tables.
    """

    config: ModelConfig

    def setup(self):
        cfg = self.config
        dtype = jnp.dtype(cfg.dtype)
        # A Dense on flattened patches is the paper's stride-P convolution, written as Eq. 1.
        self.patch_embedding = nn.Dense(cfg.d_model, dtype=dtype, param_dtype=jnp.float32)
        if cfg.pooling == "cls":
            self.cls = self.param("cls", nn.initializers.zeros, (1, 1, cfg.d_model), jnp.float32)
        # (T, D) or None: then the stack's 1-D hooks see the flattened patch index instead.
        self.grid_signal = encoding(cfg.positional).grid_signal(
            self, cfg.vit.grid_size, cfg.d_model, cls_token=cfg.pooling == "cls"
        )
        stack_cfg = cfg
        if self.grid_signal is not None:
            stack_cfg = cfg.override({"positional.kind": "none"})
        self.encoder = stack_class(stack_cfg)(stack_cfg, cfg.num_encoder_layers, causal=False)
        self.head = nn.Dense(cfg.num_classes, dtype=jnp.float32, kernel_init=nn.initializers.zeros)

    def encode(self, images_BYXC, *, train: bool = False):
        """(B, Y, X, C) images -> (B, T, D) encoder states."""
        cfg = self.config
        expected = (cfg.vit.image_size, cfg.vit.image_size, cfg.vit.num_channels)
        if images_BYXC.ndim != 4 or tuple(images_BYXC.shape[1:]) != expected:
            raise ValueError(
                f"vit inputs have shape {tuple(images_BYXC.shape)}; valid: (batch,) + {expected} "
                "from model.vit.image_size and model.vit.num_channels"
            )
        dtype = jnp.dtype(cfg.dtype)
        patches_BMQ = patchify(images_BYXC.astype(dtype), cfg.vit.patch_size)
        x_BTD = self.patch_embedding(patches_BMQ)
        batch = x_BTD.shape[0]
        if cfg.pooling == "cls":
            cls_B1D = jnp.broadcast_to(self.cls, (batch, 1, cfg.d_model)).astype(dtype)
            x_BTD = jnp.concatenate([cls_B1D, x_BTD], axis=1)  # (B, M + 1, D)
        if self.grid_signal is not None:
            x_BTD = x_BTD + self.grid_signal.astype(dtype)[None]
        valid_BT = jnp.ones(x_BTD.shape[:2], dtype=bool)
        return self.encoder(
            x_BTD, positions_BT=default_positions(valid_BT), valid_BT=valid_BT, train=train
        )

    def __call__(self, images_BYXC, *, train: bool = False):
        x_BTD = self.encode(images_BYXC, train=train)
        valid_BT = jnp.ones(x_BTD.shape[:2], dtype=bool)
        return self.head(pool(x_BTD, valid_BT, self.config.pooling).astype(jnp.float32))
