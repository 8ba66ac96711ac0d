"""Positional encodings: what tells a permutation-equivariant attention layer where words sit.

Each encoding is one registered class (`ENCODINGS`, keyed by `model.positional.kind`) that
declares what it does through hooks, every one a no-op by default:
  embed        add a signal to the token embeddings (sinusoidal, learned, index);
  rotate       rotate queries and keys inside self-attention (rotary);
  logit_bias   bias the attention logits by position (alibi), given the stack as a module
               that can hold parameters (a learned relative bias);
  grid_signal  the additive signal of a ViT's 2-D patch grid (learned, sinusoidal), or None to
               use the 1-D hooks on the row-major patch index;
  limited_to_table  positions must stay below model.positional.max_len (table lookups);
  check        reject model configs the encoding cannot serve (rotary: an odd head dimension;
               sinusoidal on a ViT grid: an odd d_model);
  train_positions  the `model.positional.train_positions` that change what it sees.
`none` leaves the model blind to order (NTHU slide 21, the "Amy" example). A new encoding is a
new subclass registered here, plus its tests; the stacks, the ViT and decoding call the hooks.
"""

import dataclasses
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax import fields as F
from transformer_jax.registry import Registry

# model.positional.sinusoidal_layout -> where the sines and cosines of the table's D/2
# frequencies go: fn(sin_LI, cos_LI) -> (L, D). The layouts hold the same values, the features
# permuted.
SINUSOIDAL_LAYOUTS: Registry = Registry("model.positional.sinusoidal_layout")


@SINUSOIDAL_LAYOUTS.register("interleaved")
def _interleaved(sin_LI: np.ndarray, cos_LI: np.ndarray) -> np.ndarray:
    """Features 2i sin, 2i+1 cos (Vaswani §3.5)."""
    return np.stack([sin_LI, cos_LI], axis=-1).reshape(sin_LI.shape[0], -1)


@SINUSOIDAL_LAYOUTS.register("sines_first")
def _sines_first(sin_LI: np.ndarray, cos_LI: np.ndarray) -> np.ndarray:
    """Features [0, D/2) the sines, [D/2, D) the cosines, frequency i at i and D/2 + i: Marian
    (transformers models/marian/modeling_marian.py:86-91, MarianSinusoidalPositionalEmbedding)."""
    return np.concatenate([sin_LI, cos_LI], axis=-1)


def sinusoidal_table(
    length: int, d_model: int, base: float = 10000.0, layout: str = "interleaved"
) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani §3.5). -> (L, D).

    `layout` "sines_first" puts the same sines in features [0, D/2) and the cosines in
    [D/2, D) (SINUSOIDAL_LAYOUTS). Positions start at 0. Computed in float64 with NumPy, so the
    table is exact to float32. An odd d_model keeps the sine of its last frequency only.
    """
    pos_L1 = np.arange(length, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    angle_LI = pos_L1 / base ** (two_i / d_model)
    table_LD = SINUSOIDAL_LAYOUTS[layout](np.sin(angle_LI), np.cos(angle_LI))
    # An odd d_model has one more sine than cosine: both layouts end with the surplus cosine.
    return table_LD[:, :d_model].astype(np.float32)


def rotary_angles(positions: jnp.ndarray, head_dim: int, base: float = 10000.0) -> jnp.ndarray:
    """m * theta_i with theta_i = base^(-2i/d) (RoFormer, Su et al. 2021). -> (..., head_dim/2)."""
    theta_I = base ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    return positions.astype(jnp.float32)[..., None] * theta_I.reshape((1,) * positions.ndim + (-1,))


def apply_rotary(x_BTNH: jnp.ndarray, pos_BT: jnp.ndarray, base: float = 10000.0) -> jnp.ndarray:
    """Rotates each pair (x_2i, x_2i+1) by the angle m * theta_i, m the token's position.

    Applied to queries and keys only: their dot product then depends on m - n alone.
    """
    head_dim = x_BTNH.shape[-1]
    angle_BT1I = rotary_angles(pos_BT, head_dim, base)[:, :, None, :]
    cos, sin = jnp.cos(angle_BT1I), jnp.sin(angle_BT1I)
    x = x_BTNH.astype(jnp.float32)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated_BTNI2 = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
    return rotated_BTNI2.reshape(x_BTNH.shape).astype(x_BTNH.dtype)


def alibi_slopes(num_heads: int) -> np.ndarray:
    """Head slopes 2^(-8k/n), k = 1..n (Press et al. 2022); non-powers of two as in the paper."""

    def power_of_two_slopes(n: int) -> list[float]:
        return [2 ** (-8.0 * k / n) for k in range(1, n + 1)]

    closest = 2 ** int(np.floor(np.log2(num_heads)))
    slopes = power_of_two_slopes(closest)
    if closest < num_heads:
        slopes += power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return np.asarray(slopes, dtype=np.float32)


def alibi_bias(
    q_pos_BT: jnp.ndarray, k_pos_BS: jnp.ndarray, num_heads: int, *, causal: bool
) -> jnp.ndarray:
    """-slope_h * distance added to the logits. -> (B, N, T, S).

    Causal attention uses i - j (the paper); bidirectional attention uses |i - j|.
    """
    distance_BTS = (q_pos_BT[:, :, None] - k_pos_BS[:, None, :]).astype(jnp.float32)
    if not causal:
        distance_BTS = jnp.abs(distance_BTS)
    slopes_N = jnp.asarray(alibi_slopes(num_heads))
    return -slopes_N[None, :, None, None] * distance_BTS[:, None, :, :]


# step_offset equals batch_offset in a stack of distinct layers; a Universal Transformer draws
# it again at every recurrent step (see `step_offsets`).
EVAL_POSITIONS = ("plain", "batch_offset", "step_offset", "randomized", "batch_randomized")
TRAIN_POSITIONS = ("plain", "offset", *EVAL_POSITIONS[1:])
# batch_randomized's second draw (which of its T positions the rows read) folds this into the
# batch key: jax.random.choice's own use of the key correlates with fold_in(key, 1).
_SUBSET_STREAM = 0x5EED


def batch_offset_bound(length: int, max_len: int, longest=None):
    """One past the largest batch offset: tensor2tensor's [0, T) for a batch T tokens long
    (`tf.random_uniform([], maxval=length)`, universal_transformer_util.py:1413-1418), cut to
    [0, max_len - T] where the table is shorter than 2 T - 1. tensor2tensor pads a batch to its
    longest example (tf's padded_batch), so T is that example's length: `longest`, the batch's
    longest real row (an int32 scalar, possibly traced), where the batch is padded further;
    default the padded length."""
    own = length if longest is None else longest
    return jnp.minimum(own, max_len - length + 1)


def step_offsets(
    key: jnp.ndarray, num_steps: int, length: int, max_len: int, longest=None
) -> jnp.ndarray:
    """(num_steps,) int32 offsets, step u's from fold_in(key, u), each uniform in
    [0, batch_offset_bound): tensor2tensor draws `tf.random_uniform([], maxval=length)` inside
    every recurrent step of the Universal Transformer (universal_transformer_util.py, in
    add_position_timing_signal, called from step_preprocess). Step 0's offset is the
    batch_offset positions drawn from fold_in(key, 0)."""
    bound = batch_offset_bound(length, max_len, longest)
    return jnp.stack(
        [jax.random.randint(jax.random.fold_in(key, u), (), 0, bound) for u in range(num_steps)]
    )


def training_positions(
    scheme: str, key: jnp.ndarray, valid_BT: jnp.ndarray, max_len: int
) -> jnp.ndarray:
    """Positions (B, T) int32 for one batch whose real tokens are `valid_BT`'s leading True
    entries; every position lies in [0, max_len), and a row's real tokens get strictly
    increasing positions, so position-built causal masks stay correct.

    offset: row b's positions are o_b, o_b + 1, ... with o_b uniform in [0, max_len - n_b]
      (n_b its real tokens), so every position of the table is trained.
    batch_offset: tensor2tensor's position_start_index="random" (the Universal Transformer
      paper's algorithmic runs): every row's positions are o, o + 1, ... with one o per batch,
      uniform in [0, T), T the batch's longest real row, the length tensor2tensor's batch is
      padded to (in [0, max_len - T_padded] where the table is shorter). Training reaches
      positions up to about twice the training length, not the whole table, and the task stays
      nearly as easy to learn as with plain positions.
    step_offset: batch_offset drawn from fold_in(key, 0); a Universal Transformer redraws it at
      every recurrent step (`step_offsets`), as tensor2tensor does.
    randomized: row b's real tokens get n_b positions drawn uniformly without replacement
      from [0, max_len) and sorted; drawn per row and for the real length, not the padded one,
      so that long rows and short rows alike reach the end of the range.
    batch_randomized: Ruoss et al. (2023)'s code (models/positional_encodings.py:218-224,
      noisy_fixed_positional_encodings: `jrandom.choice(rng, jnp.arange(noise_max_length),
      shape=(sequence_length,), replace=False)` then `jnp.sort`): ONE sorted subset per batch,
      of as many positions as its longest row has real tokens, shared by every row (a row of
      n_b real tokens reads the first n_b). Their batches hold one length each (their
      curriculum draws one per step: experiments/training.py:258-261, curriculum.py:68-71;
      here data.bucket_by_length="each"), so every row's subset spreads over [0, max_len); in
      a batch of mixed lengths the short rows' positions bunch at the low end.
    Padding gets distinct unused positions (offset: clipped to max_len - 1); attention masks
    it out.
    """
    batch, length = valid_BT.shape
    if length > max_len:
        raise ValueError(
            f"the input has {length} positions, more than model.positional.max_len={max_len}, "
            "the range training positions are drawn from; raise max_len"
        )
    n_B1 = valid_BT.sum(axis=1, keepdims=True).astype(jnp.int32)
    if scheme == "offset":
        offset_B1 = jax.random.randint(key, (batch, 1), 0, max_len - n_B1 + 1)
        steps_1T = jnp.arange(length, dtype=jnp.int32)[None, :]
        return jnp.minimum(offset_B1 + steps_1T, max_len - 1)
    if scheme in ("batch_offset", "step_offset"):
        if scheme == "step_offset":
            key = jax.random.fold_in(key, 0)
        bound = batch_offset_bound(length, max_len, n_B1.max())
        offset = jax.random.randint(key, (), 0, bound)
        return jnp.broadcast_to(offset + jnp.arange(length, dtype=jnp.int32), (batch, length))
    if scheme == "batch_randomized":
        # One sorted subset for the batch's longest real row, n_max of the max_len positions:
        # a uniform n_max-subset of a uniform T-subset, so a batch padded past its rows (T >
        # n_max) spreads them over the range too; with n_max = T it is the T-subset itself.
        subset_T = jnp.sort(jax.random.choice(key, max_len, shape=(length,), replace=False))
        scores_T = jax.random.uniform(jax.random.fold_in(key, _SUBSET_STREAM), (length,))
        chosen_T = jnp.argsort(jnp.argsort(scores_T)) < n_B1.max()
        slots_T = jnp.arange(length, dtype=jnp.int32)
        order_T = jnp.argsort(jnp.where(chosen_T, 0, length) + slots_T)  # chosen first, in order
        return jnp.broadcast_to(subset_T[order_T].astype(jnp.int32), (batch, length))
    if scheme == "randomized":
        # The n_b slots of lowest random score are chosen; sorting chosen-first, then by slot,
        # lists them in increasing order, followed by the unchosen ones.
        scores_BL = jax.random.uniform(key, (batch, max_len))
        rank_BL = jnp.argsort(jnp.argsort(scores_BL, axis=1), axis=1)
        slots_1L = jnp.arange(max_len, dtype=jnp.int32)[None, :]
        order_BL = jnp.argsort(jnp.where(rank_BL < n_B1, 0, max_len) + slots_1L, axis=1)
        return order_BL[:, :length].astype(jnp.int32)
    raise ValueError(f"model.positional.train_positions={scheme!r}; valid: {TRAIN_POSITIONS}")


@dataclasses.dataclass(frozen=True)
class PositionalConfig:
    """Where tokens sit: `kind` names an entry of ENCODINGS below."""

    PREFIX: ClassVar[str] = "model.positional"

    kind: str = "sinusoidal"  # sinusoidal | learned | rotary | alibi | none | index
    base: float = 10000.0  # wavelength base of the sinusoidal table and of rotary angles
    # The sinusoidal table's features: interleaved (sin, cos of each frequency side by side,
    # the paper) or sines_first (all sines, then all cosines: Marian). SINUSOIDAL_LAYOUTS.
    sinusoidal_layout: str = "interleaved"
    max_len: int = 256  # longest sequence, in tokens; sizes position tables
    # Positions during training (evaluation: eval_positions below): plain; offset,
    # each sequence starts at a random offset, covering the whole table; batch_offset, one
    # random offset per batch below its length (tensor2tensor's position_start_index="random");
    # step_offset, the same drawn again at every recurrent step of a Universal Transformer (as
    # tensor2tensor does; batch_offset elsewhere); randomized, an ordered random subset of
    # 0 .. max_len - 1 per sequence; batch_randomized, one such subset per batch (Ruoss et al.
    # 2023's code). Each lets training reach the positions of longer test inputs. See
    # training_positions.
    train_positions: str = "plain"
    # Positions at evaluation: plain (0, 1, 2, ...), or drawn by one of the random schemes
    # above: tensor2tensor draws its offsets at evaluation too, and Ruoss et al. 2023's code its
    # subsets (a model trained on sorted random subsets of 0 .. max_len - 1 has never seen
    # consecutive positions). Drawn from the "positions" rng the caller passes (evaluation
    # passes a fresh key per batch: train.step.eval_step), else from a fixed key; cached
    # decoding reads the cache index (plain).
    eval_positions: str = "plain"

    def __post_init__(self):
        F.check_choice(f"{self.PREFIX}.kind", self.kind, ENCODINGS.names())
        F.check_float(f"{self.PREFIX}.base", self.base, above=1.0)
        F.check_choice(
            f"{self.PREFIX}.sinusoidal_layout", self.sinusoidal_layout, SINUSOIDAL_LAYOUTS.names()
        )
        if self.sinusoidal_layout != "interleaved" and self.kind != "sinusoidal":
            raise ValueError(
                f"{self.PREFIX}.sinusoidal_layout={self.sinusoidal_layout!r} has no effect with "
                f"{self.PREFIX}.kind={self.kind!r}; valid: sinusoidal_layout='interleaved', or "
                "kind='sinusoidal'"
            )
        F.check_int(f"{self.PREFIX}.max_len", self.max_len, 1)
        F.check_choice(f"{self.PREFIX}.train_positions", self.train_positions, TRAIN_POSITIONS)
        F.check_choice(f"{self.PREFIX}.eval_positions", self.eval_positions, EVAL_POSITIONS)
        subsets = ("randomized", "batch_randomized")
        if self.eval_positions in subsets and self.train_positions not in subsets:
            raise ValueError(
                f"{self.PREFIX}.eval_positions={self.eval_positions!r} evaluates with random "
                f"subsets of positions, which only a model trained on them reads, but "
                f"{self.PREFIX}.train_positions={self.train_positions!r}; valid: "
                f"eval_positions='plain', or train_positions one of {list(subsets)}"
            )
        valid = ENCODINGS[self.kind].train_positions
        for field in ("train_positions", "eval_positions"):
            value = getattr(self, field)
            if value not in valid:
                raise ValueError(
                    f"{self.PREFIX}.{field}={value!r} has no effect with "
                    f"{self.PREFIX}.kind={self.kind!r} (it reads only distances between "
                    f"positions, or none); valid for {self.kind!r}: {list(valid)}"
                )


ENCODINGS: Registry[type["PositionalEncoding"]] = Registry("model.positional.kind")


@dataclasses.dataclass(frozen=True)
class PositionalEncoding:
    """No position signal at all (`none`); the base of every encoding, all hooks no-ops.

    Longer inputs: an encoder is blind to order at every length (reverse is impossible); a
    causal decoder can still count its prefix through the mask (Kazemnejad et al. 2023,
    "NoPE"), so nothing position-specific breaks past the training length, but counting
    precision decays as attention spreads over more keys.
    """

    config: PositionalConfig
    limited_to_table: ClassVar[bool] = False
    # Absolute encodings read every scheme; relative ones (rotary, alibi) are blind to an
    # offset but see the stretched distances of randomized positions; `none` sees nothing.
    train_positions: ClassVar[tuple[str, ...]] = ("plain",)

    def check(self, model_config) -> None:
        """Raises ValueError for a ModelConfig this encoding cannot serve."""
        del model_config

    def embed(self, x_BTD: jnp.ndarray, pos_BT: jnp.ndarray) -> jnp.ndarray:
        """Embeddings plus the absolute signal; called inside a compact module (may add
        parameters)."""
        del pos_BT
        return x_BTD

    def rotate(self, x_BTNH: jnp.ndarray, pos_BT: jnp.ndarray) -> jnp.ndarray:
        """Self-attention queries or keys, rotated by position."""
        del pos_BT
        return x_BTNH

    def logit_bias(
        self, module: nn.Module, q_pos_BT, k_pos_BS, num_heads: int, *, causal: bool
    ) -> jnp.ndarray | None:
        """An additive (B|1, N, T, S) attention-logit bias shared by every layer of a stack, or
        None. Called once per forward pass from the stack's compact method; `module` (the stack)
        holds any parameters, as a learned relative bias (T5's buckets) would."""
        del module, q_pos_BT, k_pos_BS, num_heads, causal

    def grid_signal(self, module: nn.Module, grid_size: int, d_model: int, cls_token: bool):
        """A ViT's additive (T, D) signal over its grid_size^2 patches (row-major, after a class
        token if any), or None to use the 1-D hooks on the flattened patch index.
        Called from the ViT's setup; `module` holds any parameters."""
        del module, grid_size, d_model, cls_token


ENCODINGS.add("none", PositionalEncoding)


@ENCODINGS.register("sinusoidal")
@dataclasses.dataclass(frozen=True)
class Sinusoidal(PositionalEncoding):
    """The paper's fixed table (Vaswani §3.5); 2-D sin-cos on a ViT grid (rows, then columns,
    as MAE and big_vision do; the class token gets zeros).

    Longer inputs: the table is defined everywhere, and Vaswani et al. chose it hoping it
    "may allow the model to extrapolate", but positions past training are vectors the layers
    never saw; Press et al. (2022) find it degrades within ~20 tokens past L. With
    train_positions="offset" or "randomized" every position up to max_len is seen in training,
    which predicts no cliff at the training length.
    """

    limited_to_table: ClassVar[bool] = True
    train_positions: ClassVar[tuple[str, ...]] = TRAIN_POSITIONS

    def check(self, model_config):
        if model_config.vit is not None and model_config.d_model % 2:
            raise ValueError(
                f"model.d_model={model_config.d_model} must be even for a vit with "
                "model.positional.kind='sinusoidal' (half the features encode rows, half columns)"
            )

    def embed(self, x_BTD, pos_BT):
        cfg = self.config
        table_LD = sinusoidal_table(cfg.max_len, x_BTD.shape[-1], cfg.base, cfg.sinusoidal_layout)
        return x_BTD + jnp.asarray(table_LD)[pos_BT].astype(x_BTD.dtype)

    def grid_signal(self, module, grid_size, d_model, cls_token):
        cfg = self.config
        table_ND = sinusoidal_2d_table(
            grid_size, grid_size, d_model, cfg.base, cfg.sinusoidal_layout
        )
        if cls_token:
            table_ND = np.concatenate([np.zeros((1, d_model), np.float32), table_ND])
        return jnp.asarray(table_ND)


@ENCODINGS.register("learned")
@dataclasses.dataclass(frozen=True)
class Learned(PositionalEncoding):
    """One learned vector per position (BERT, GPT-2, ViT's default: one per patch and one for
    the class token, the paper's 1-D table over the row-major patch index).

    Longer inputs: rows past the longest training position keep their random initialisation
    (no gradient ever reaches them), so accuracy should collapse right after the training
    length; offset or randomized training positions train every row and remove that cliff.
    """

    limited_to_table: ClassVar[bool] = True
    train_positions: ClassVar[tuple[str, ...]] = TRAIN_POSITIONS

    def embed(self, x_BTD, pos_BT):
        table = nn.Embed(
            self.config.max_len,
            x_BTD.shape[-1],
            embedding_init=nn.initializers.normal(stddev=0.02),
            name="table",
        )
        return x_BTD + table(pos_BT).astype(x_BTD.dtype)

    def grid_signal(self, module, grid_size, d_model, cls_token):
        return module.param(
            "position_embedding",
            nn.initializers.normal(stddev=0.02),
            (grid_size**2 + cls_token, d_model),
            jnp.float32,
        )


@ENCODINGS.register("index")
@dataclasses.dataclass(frozen=True)
class Index(PositionalEncoding):
    """The lecture's counter-example: the raw positions 1, 2, 3, ... added to every feature
    (NTHU slide 22).

    Longer inputs: the signal's magnitude grows without bound and swamps the token embedding,
    so accuracy should fall as soon as positions exceed those seen in training.
    """

    train_positions: ClassVar[tuple[str, ...]] = TRAIN_POSITIONS

    def embed(self, x_BTD, pos_BT):
        return x_BTD + jnp.broadcast_to((pos_BT + 1)[..., None], x_BTD.shape).astype(x_BTD.dtype)


@ENCODINGS.register("rotary")
@dataclasses.dataclass(frozen=True)
class Rotary(PositionalEncoding):
    """RoFormer (Su et al. 2021): queries and keys rotated by their positions.

    Longer inputs: logits depend on m - n only, so no absolute position is new, but distances
    past the training length are; Press et al. (2022) measure a slow degradation (~L + 200
    tokens in language modelling) rather than a cliff. Randomized positions train the larger
    distances.
    """

    train_positions: ClassVar[tuple[str, ...]] = ("plain", "randomized", "batch_randomized")

    def check(self, model_config):
        if model_config.head_dim % 2:
            raise ValueError(
                "model.positional.kind='rotary' rotates pairs of dimensions, so the head "
                f"dimension d_model/num_heads={model_config.head_dim} must be even"
            )

    def rotate(self, x_BTNH, pos_BT):
        return apply_rotary(x_BTNH, pos_BT, self.config.base)


@ENCODINGS.register("alibi")
@dataclasses.dataclass(frozen=True)
class ALiBi(PositionalEncoding):
    """Press et al. (2022): a per-head linear distance penalty on the logits.

    Longer inputs: the paper's claim, for causal language models, is stable perplexity at
    2-6x the training length, because the penalty makes far tokens nearly invisible. That
    recency bias predicts the opposite on tasks that must read far away (reverse: the first
    output reads the last input): accuracy should fall with length.
    """

    train_positions: ClassVar[tuple[str, ...]] = ("plain", "randomized", "batch_randomized")

    def logit_bias(self, module, q_pos_BT, k_pos_BS, num_heads, *, causal):
        del module  # no parameters
        return alibi_bias(q_pos_BT, k_pos_BS, num_heads, causal=causal)


def encoding(config: PositionalConfig) -> PositionalEncoding:
    """The registered encoding of `config.kind`, bound to its config."""
    return ENCODINGS[config.kind](config)


def sinusoidal_2d_table(
    grid_h: int, grid_w: int, d_model: int, base: float = 10000.0, layout: str = "interleaved"
):
    """(grid_h * grid_w, D) fixed 2-D position table, row-major like a ViT's patches.

    Features [0, D/2) are the 1-D sinusoidal table of the patch row, features [D/2, D) that of
    the column (each in `layout`), so nearby patches in either direction get similar codes.
    """
    half = d_model // 2
    row_table, col_table = (sinusoidal_table(n, half, base, layout) for n in (grid_h, grid_w))
    rows = np.broadcast_to(row_table[:, None], (grid_h, grid_w, half))
    cols = np.broadcast_to(col_table[None, :], (grid_h, grid_w, half))
    return np.concatenate([rows, cols], axis=-1).reshape(grid_h * grid_w, d_model)


class AddPositional(nn.Module):
    """Adds the encoding's absolute position signal to embeddings (a no-op for most)."""

    config: PositionalConfig

    @nn.compact
    def __call__(self, x_BTD: jnp.ndarray, pos_BT: jnp.ndarray) -> jnp.ndarray:
        """Raises (at trace time, on the static length) for a table encoding given more
        positions than its table holds: a lookup past it would clamp or give NaN."""
        enc = encoding(self.config)
        length = x_BTD.shape[-2]
        if enc.limited_to_table and length > self.config.max_len:
            raise ValueError(
                f"the input has {length} positions, more than model.positional.max_len="
                f"{self.config.max_len} ({self.config.kind} positions are a table of that "
                "size); shorten the input or train with a larger max_len"
            )
        return enc.embed(x_BTD, pos_BT)
