"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

An image is cut into non-overlapping P x P patches, each flattened and linearly projected to
d_model (the paper's Eq. 1), read in row-major order as a sequence of N = (S/P)^2 tokens; a
class token is prepended (`pooling="cls"`) or the states are averaged (`pooling="mean"`, the
paper's "GAP" variant); then the same encoder stack as the text models and a linear head.

Positions (`model.positional`):
  learned     one learned vector per patch (and one for the class token), the paper's default;
              a table over the 2-D grid is the paper's 1-D table over the row-major patch index.
  sinusoidal  fixed 2-D sin-cos: the first half of the features encodes the patch row, the
              second half the column (as MAE and big_vision do); the class token gets zeros.
  none        no position signal: the encoder is equivariant to permutations of the patches.
  rotary, alibi, index
              the text versions on the flattened row-major index (class token 0, patches
              1..N; without a class token patches 0..N-1), so vertical neighbours are
              S/P positions apart: a 1-D stand-in, not a 2-D method.
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from transformer_jax.config import ModelConfig
from transformer_jax.layers.positional import sinusoidal_table
from transformer_jax.models.classifier import pool
from transformer_jax.models.stack import default_positions
from transformer_jax.models.universal import stack_class

# Positional kinds this module adds itself, on the 2-D patch grid; the stack then adds none.
GRID_POSITIONALS = ("learned", "sinusoidal")


def patchify(images_BHWC: jnp.ndarray, patch_size: int) -> jnp.ndarray:
    """(B, H, W, C) -> (B, N, P*P*C), patches in row-major order, each flattened as (P, P, C).

    N = (H/P) * (W/P); H and W must be multiples of P.
    """
    b, h, w, c = images_BHWC.shape
    p = patch_size
    x_BhPwPC = images_BHWC.reshape(b, h // p, p, w // p, p, c)
    x_BhwPPC = x_BhPwPC.transpose(0, 1, 3, 2, 4, 5)
    return x_BhwPPC.reshape(b, (h // p) * (w // p), p * p * c)


def unpatchify(patches_BNK: jnp.ndarray, patch_size: int, height: int, width: int) -> jnp.ndarray:
    """The inverse of `patchify`: (B, N, P*P*C) -> (B, H, W, C)."""
    b, _, k = patches_BNK.shape
    p = patch_size
    c = k // (p * p)
    x_BhwPPC = patches_BNK.reshape(b, height // p, width // p, p, p, c)
    return x_BhwPPC.transpose(0, 1, 3, 2, 4, 5).reshape(b, height, width, c)


def sinusoidal_2d_table(grid_h: int, grid_w: int, d_model: int) -> np.ndarray:
    """(grid_h * grid_w, D) fixed 2-D position table, row-major like `patchify`.

    Features [0, D/2) are the 1-D sinusoidal table (Vaswani §3.5) of the patch row, features
    [D/2, D) that of the column, so nearby patches in either direction get similar codes.
    """
    half = d_model // 2
    rows_hwE = np.broadcast_to(sinusoidal_table(grid_h, half)[:, None], (grid_h, grid_w, half))
    cols_hwE = np.broadcast_to(sinusoidal_table(grid_w, half)[None, :], (grid_h, grid_w, half))
    return np.concatenate([rows_hwE, cols_hwE], axis=-1).reshape(grid_h * grid_w, d_model)


class ViT(nn.Module):
    """(B, S, S, C) float images -> (B, num_classes) float32 logits.

    `encode` returns the encoder states (B, T, D), T = N (+1 with a class token first).
    The head is zero-initialised (big_vision's default), so training starts from uniform
    predictions; there is no pre-logits layer (the paper uses one for pre-training only).
    Patch embeddings are not multiplied by sqrt(d_model): `scale_embeddings` is for token tables.
    """

    config: ModelConfig

    def setup(self):
        cfg = self.config
        self.num_tokens = cfg.num_patches + (cfg.pooling == "cls")
        dtype = jnp.dtype(cfg.dtype)
        # A Dense on flattened patches is the paper's stride-P convolution, written as Eq. 1.
        self.patch_embedding = nn.Dense(cfg.d_model, dtype=dtype, param_dtype=jnp.float32)
        if cfg.pooling == "cls":
            self.cls = self.param("cls", nn.initializers.zeros, (1, 1, cfg.d_model), jnp.float32)
        if cfg.positional == "learned":
            self.position_table = self.param(
                "position_embedding",
                nn.initializers.normal(stddev=0.02),
                (self.num_tokens, cfg.d_model),
                jnp.float32,
            )
        # The stack adds 1-D additive positions itself; the 2-D ones are added here instead.
        stack_cfg = cfg.replace(positional="none") if cfg.positional in GRID_POSITIONALS else cfg
        self.encoder = stack_class(stack_cfg)(stack_cfg, cfg.num_encoder_layers, causal=False)
        self.head = nn.Dense(cfg.num_classes, dtype=jnp.float32, kernel_init=nn.initializers.zeros)

    def encode(self, images_BHWC, *, train: bool = False):
        """(B, S, S, C) images -> (B, T, D) encoder states."""
        cfg = self.config
        expected = (cfg.image_size, cfg.image_size, cfg.num_channels)
        if images_BHWC.ndim != 4 or tuple(images_BHWC.shape[1:]) != expected:
            raise ValueError(
                f"vit inputs have shape {tuple(images_BHWC.shape)}; valid: (batch,) + {expected} "
                "from model.image_size and model.num_channels"
            )
        dtype = jnp.dtype(cfg.dtype)
        patches_BNK = patchify(images_BHWC.astype(dtype), cfg.patch_size)
        x_BTD = self.patch_embedding(patches_BNK)
        batch = x_BTD.shape[0]
        if cfg.pooling == "cls":
            cls_B1D = jnp.broadcast_to(self.cls, (batch, 1, cfg.d_model)).astype(dtype)
            x_BTD = jnp.concatenate([cls_B1D, x_BTD], axis=1)  # (B, N + 1, D)
        if cfg.positional in GRID_POSITIONALS:
            x_BTD = x_BTD + self._grid_positions().astype(dtype)[None]
        valid_BT = jnp.ones(x_BTD.shape[:2], dtype=bool)
        return self.encoder(
            x_BTD, positions_BT=default_positions(valid_BT), valid_BT=valid_BT, train=train
        )

    def _grid_positions(self) -> jnp.ndarray:
        """(T, D) additive position signal of a `GRID_POSITIONALS` kind."""
        cfg = self.config
        if cfg.positional == "learned":
            return self.position_table
        grid = cfg.image_size // cfg.patch_size
        table_ND = sinusoidal_2d_table(grid, grid, cfg.d_model)
        if cfg.pooling == "cls":
            table_ND = np.concatenate([np.zeros((1, cfg.d_model), np.float32), table_ND])
        return jnp.asarray(table_ND)

    def __call__(self, images_BHWC, *, train: bool = False):
        x_BTD = self.encode(images_BHWC, train=train)
        valid_BT = jnp.ones(x_BTD.shape[:2], dtype=bool)
        return self.head(pool(x_BTD, valid_BT, self.config.pooling).astype(jnp.float32))
