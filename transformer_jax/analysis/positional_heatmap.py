"""Heatmaps of positional encodings, and why nearby positions look alike (NTHU slides 24-30).

  python -m transformer_jax.analysis.positional_heatmap --out=results/analysis/sinusoidal.png
  python -m transformer_jax.analysis.positional_heatmap --kind=rotary --out=rotary.png

`sinusoidal`: the table PE (positions x d_model) of Vaswani et al. §3.5, as the model adds it.
`rotary`: cos(m * theta_i), positions m x frequency pairs i, the angles RoFormer (Su et al. 2021)
rotates each (q, k) pair by.

The right panel is the similarity of two positions k apart. For the sinusoidal table
PE(p) . PE(p+k) = sum_i cos(k * w_i): it depends on the offset k only, equals d_model/2 at k = 0
and falls off for small k, so nearby positions have similar encodings. For rotary it is the
product r(p) . r(p+k) of a vector of unit pairs (1, 0) rotated to positions p and p+k, the same
sum over the head's frequencies; it is also the part of a rotary attention logit that carries
position.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
from absl import app, flags

from transformer_jax.analysis.figures import new_figure, save_png
from transformer_jax.analysis.flags import define_common_flags
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.layers.positional import apply_rotary, rotary_angles, sinusoidal_table

KINDS = ("sinusoidal", "rotary")


@dataclasses.dataclass(frozen=True)
class PositionalHeatmap:
    """What the figure shows.

    heatmap_LI: sinusoidal: the table (L, D); rotary: cos(m * theta_i) (L, I = D / 2).
    vectors_LD: the position vectors whose dot products are taken, (L, D).
    offsets_J, similarity_J: PE(0) . PE(k) for offsets k = 0 .. J-1.
    spread_J: over all starting positions p, max - min of PE(p) . PE(p+k) (0 up to rounding:
      the similarity depends on the offset only).
    """

    kind: str
    heatmap_LI: np.ndarray
    vectors_LD: np.ndarray
    offsets_J: np.ndarray
    similarity_J: np.ndarray
    spread_J: np.ndarray


def check_args(kind: str, num_positions: int, d_model: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"--kind={kind!r} is not valid; choose one of {list(KINDS)}")
    if num_positions < 2:
        raise ValueError(f"--positions={num_positions} must be >= 2")
    if d_model < 2 or d_model % 2:
        raise ValueError(f"--d_model={d_model} must be an even integer >= 2 (sin/cos pairs)")


def rotary_vectors(num_positions: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """Unit pairs (1, 0) rotated by m * theta_i with `apply_rotary`, m = 0 .. L-1. -> (L, D).

    Row m is (cos m*theta_0, sin m*theta_0, cos m*theta_1, ...).
    """
    ones_LD = np.zeros((num_positions, d_model), np.float32)
    ones_LD[:, 0::2] = 1.0
    x_1L1D = jnp.asarray(ones_LD)[None, :, None, :]
    pos_1P = jnp.arange(num_positions)[None]
    return np.asarray(apply_rotary(x_1L1D, pos_1P, base))[0, :, 0, :]


def similarity_by_offset(vectors_LD: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PE(0) . PE(k) for k = 0 .. L-1 -> (L,), and its spread over start positions p -> (L,).

    The spread at offset k is max_p - min_p of PE(p) . PE(p+k) over p = 0 .. P-1-k.
    """
    vectors = vectors_LD.astype(np.float64)
    gram_LL = vectors @ vectors.T
    num = len(vectors)
    similarity, spread = np.zeros(num), np.zeros(num)
    for k in range(num):
        diagonal = np.diagonal(gram_LL, offset=k)
        similarity[k] = diagonal[0]
        spread[k] = diagonal.max() - diagonal.min()
    return similarity, spread


def positional_heatmap(
    kind: str = "sinusoidal", num_positions: int = 100, d_model: int = 64, base: float = 1e4
) -> PositionalHeatmap:
    """The heatmap and the offset similarity of one positional encoding."""
    check_args(kind, num_positions, d_model)
    if kind == "sinusoidal":
        vectors_LD = sinusoidal_table(num_positions, d_model, base)
        heatmap_LI = vectors_LD
    else:
        vectors_LD = rotary_vectors(num_positions, d_model, base)
        heatmap_LI = np.cos(np.asarray(rotary_angles(jnp.arange(num_positions), d_model, base)))
    similarity, spread = similarity_by_offset(vectors_LD)
    return PositionalHeatmap(
        kind=kind,
        heatmap_LI=np.asarray(heatmap_LI),
        vectors_LD=np.asarray(vectors_LD),
        offsets_J=np.arange(num_positions),
        similarity_J=similarity,
        spread_J=spread,
    )


def plot(result: PositionalHeatmap, out: str):
    fig, axes = new_figure(1, 2, width=11.0, height=4.2)
    ax = axes[0, 0]
    image = ax.imshow(
        result.heatmap_LI, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
    )
    fig.colorbar(image, ax=ax)
    ax.set_ylabel("position")
    if result.kind == "sinusoidal":
        ax.set_title(f"sinusoidal PE, d_model = {result.heatmap_LI.shape[1]}")
        ax.set_xlabel("dimension (even: sin, odd: cos)")
    else:
        ax.set_title(f"rotary: cos(m theta_i), head dim = {2 * result.heatmap_LI.shape[1]}")
        ax.set_xlabel("frequency pair i (theta_i = base^(-2i/d))")
    ax = axes[0, 1]
    ax.plot(result.offsets_J, result.similarity_J, color="C0")
    ax.axhline(0.0, color="0.7", linewidth=0.8)
    ax.set_xlabel("offset k")
    ax.set_ylabel("PE(p) . PE(p+k)" if result.kind == "sinusoidal" else "r(p) . r(p+k)")
    ax.set_title("similarity of positions k apart (same for every p)")
    return save_png(fig, out)


def report(result: PositionalHeatmap) -> str:
    name = "PE(p).PE(p+k)" if result.kind == "sinusoidal" else "r(p).r(p+k)"
    lines = [
        f"{result.kind}: heatmap {result.heatmap_LI.shape[0]} positions x "
        f"{result.heatmap_LI.shape[1]} columns, values in "
        f"[{result.heatmap_LI.min():.3f}, {result.heatmap_LI.max():.3f}]",
        f"{'offset k':>15} " + " ".join(f"{k:>6d}" for k in _shown(result)),
        f"{name:>15} " + " ".join(f"{result.similarity_J[k]:6.2f}" for k in _shown(result)),
        f"largest spread over start positions p: {result.spread_J.max():.2e} "
        "(the similarity depends on k only)",
    ]
    return "\n".join(lines)


def _shown(result: PositionalHeatmap) -> list[int]:
    return [k for k in (0, 1, 2, 5, 10, 20, 50, 99) if k < len(result.offsets_J)]


def _define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    fv = flag_values
    flags.DEFINE_enum(
        "kind", "sinusoidal", list(KINDS), "Which positional encoding to show.", flag_values=fv
    )
    flags.DEFINE_integer("positions", 100, "Number of positions (rows).", flag_values=fv)
    flags.DEFINE_integer(
        "d_model", 64, "Model (sinusoidal) or head (rotary) dimension.", flag_values=fv
    )
    flags.DEFINE_float("base", 10000.0, "The wavelength base (10000 in the paper).", flag_values=fv)
    define_common_flags("out", flag_values=fv)


@one_line_errors("positional_heatmap")
def main(argv):
    del argv
    f = flags.FLAGS
    result = positional_heatmap(f.kind, f.positions, f.d_model, f.base)
    print(report(result))
    print(f"wrote {plot(result, f.out)}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=parse_flags("positional_heatmap"))
