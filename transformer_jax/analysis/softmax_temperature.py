"""Why attention divides by sqrt(d_k): the NCCU slides 31-33 numbers and Vaswani §3.2.1.

  python -m transformer_jax.analysis.softmax_temperature --out=results/analysis/softmax.png

1. The slides' example: softmax([3.9, 3.2, 1, 0.3, 1.1]) = [0.61, 0.30, 0.03, 0.02, 0.04] is
   winner-take-all; dividing the scores by tau = sqrt(5) gives [0.40, 0.29, 0.11, 0.08, 0.11].
2. The paper's argument (footnote 4): if the components of q and k are independent with mean 0
   and variance 1, q . k has variance d_k. Without the 1/sqrt(d_k) factor the logits spread
   with d_k, the softmax saturates (its largest weight tends to 1) and its Jacobian
   d softmax / d logits, diag(p) - p p^T, tends to 0: the gradient through attention vanishes
   (NTHU slide 13). With the factor the logits keep unit variance at every d_k.

All numbers come from the attention layer's own functions (`attention_logits`,
`attention_weights`), so this checks the code that the models run.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from transformer_jax.analysis.figures import new_figure, save_png
from transformer_jax.analysis.flags import define_common_flags
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.layers.attention import attention_logits, attention_weights

SLIDE_SCORES = (3.9, 3.2, 1.0, 0.3, 1.1)  # NCCU slide 32.
SLIDE_TAU = math.sqrt(5.0)  # NCCU slide 33.
SCALINGS = ("none", "sqrt_dk")  # Values of `model.attention.scale`.


def softmax_with_temperature(scores, tau: float = 1.0) -> np.ndarray:
    """softmax(scores / tau) over the last axis, computed by the attention layer's softmax."""
    if tau <= 0:
        raise ValueError(f"--tau={tau} must be > 0")
    return np.asarray(attention_weights(jnp.asarray(scores, jnp.float32) / tau))


@dataclasses.dataclass(frozen=True)
class ScalingSweep:
    """Statistics of one random attention row per sample, for each d_k and each scaling.

    d_k: (M,) key dimensions. Each dict maps a scaling in SCALINGS to an (M,) array:
      logit_var: variance of the logits q . k * scale;
      max_prob: mean over samples of the largest attention weight (1 / num_keys is uniform);
      jacobian_norm: mean over samples of the Frobenius norm of d softmax / d logits.
    """

    d_k: np.ndarray
    num_keys: int
    logit_var: dict[str, np.ndarray]
    max_prob: dict[str, np.ndarray]
    jacobian_norm: dict[str, np.ndarray]


@jax.jit
def _row_statistics(q_B11H, k_BS1H, scale):
    """Logit variance, mean largest weight and mean Jacobian norm of B one-query rows."""
    logits_BS = attention_logits(q_B11H, k_BS1H, scale)[:, 0, 0, :]
    probs_BS = attention_weights(logits_BS)
    jac_BSS = jax.vmap(jax.jacfwd(attention_weights))(logits_BS)
    return (
        jnp.var(logits_BS),
        jnp.mean(jnp.max(probs_BS, axis=-1)),
        jnp.mean(jnp.linalg.norm(jac_BSS, axis=(1, 2))),
    )


def scaling_sweep(
    d_ks=tuple(2**i for i in range(11)), num_keys: int = 16, samples: int = 2000, seed: int = 0
) -> ScalingSweep:
    """For each d_k: `samples` queries against `num_keys` keys, all entries N(0, 1)."""
    if num_keys < 2:
        raise ValueError(f"--num_keys={num_keys} must be >= 2")
    if samples < 2:
        raise ValueError(f"--samples={samples} must be >= 2")
    if not d_ks or min(d_ks) < 1:
        raise ValueError(f"--d_k values {list(d_ks)} must be integers >= 1")
    stats = {name: {s: [] for s in SCALINGS} for name in ("var", "max", "jac")}
    for d_k in d_ks:
        # NumPy draws: jax.random would compile anew for every d_k, for no benefit here.
        rng = np.random.default_rng([seed, d_k])
        # One query per sample (T = 1) and one head (N = K = 1): shapes (B, T, N, H), (B, S, K, H).
        q_B11H = rng.standard_normal((samples, 1, 1, d_k), dtype=np.float32)
        k_BS1H = rng.standard_normal((samples, num_keys, 1, d_k), dtype=np.float32)
        for scaling in SCALINGS:
            scale = 1.0 if scaling == "none" else 1.0 / math.sqrt(d_k)
            var, max_prob, jacobian_norm = _row_statistics(q_B11H, k_BS1H, scale)
            stats["var"][scaling].append(float(var))
            stats["max"][scaling].append(float(max_prob))
            stats["jac"][scaling].append(float(jacobian_norm))
    as_arrays = lambda d: {s: np.asarray(v) for s, v in d.items()}  # noqa: E731
    return ScalingSweep(
        d_k=np.asarray(d_ks),
        num_keys=num_keys,
        logit_var=as_arrays(stats["var"]),
        max_prob=as_arrays(stats["max"]),
        jacobian_norm=as_arrays(stats["jac"]),
    )


def plot(scores, tau: float, sweep: ScalingSweep, out: str):
    fig, axes = new_figure(2, 2, width=10.0, height=7.5)
    ax = axes[0, 0]
    plain, cooled = softmax_with_temperature(scores), softmax_with_temperature(scores, tau)
    x = np.arange(len(scores))
    for offset, probs, label in ((-0.2, plain, "tau = 1"), (0.2, cooled, f"tau = {tau:.3g}")):
        bars = ax.bar(x + offset, probs, width=0.4, label=label)
        ax.bar_label(bars, labels=[f"{p:.2f}" for p in probs], fontsize=8)
    ax.set_xticks(x, [f"{s:g}" for s in scores])
    ax.set_xlabel("score")
    ax.set_ylabel("softmax(score / tau)")
    ax.set_title("NCCU slides 31-33")
    ax.legend()
    labels = {"none": "q.k (no scaling)", "sqrt_dk": "q.k / sqrt(d_k)"}
    panels = (
        (axes[0, 1], sweep.logit_var, "variance of the logits", True),
        (axes[1, 0], sweep.max_prob, "mean largest attention weight", False),
        (axes[1, 1], sweep.jacobian_norm, "mean ||d softmax / d logits||_F", True),
    )
    for ax, values, title, log_y in panels:
        for scaling in SCALINGS:
            ax.plot(sweep.d_k, values[scaling], marker="o", label=labels[scaling])
        ax.set_xscale("log", base=2)
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel("d_k")
        ax.set_title(title)
    axes[0, 1].plot(sweep.d_k, sweep.d_k, "k--", linewidth=0.8, label="d_k")
    axes[1, 0].axhline(1.0 / sweep.num_keys, color="0.6", linestyle=":", label="uniform")
    axes[1, 0].set_ylim(0, 1.05)
    for ax in (axes[0, 1], axes[1, 0]):
        ax.legend(fontsize=8)
    return save_png(fig, out)


def report(scores, tau: float, sweep: ScalingSweep) -> str:
    fmt = lambda v: "[" + ", ".join(f"{x:.2f}" for x in v) + "]"  # noqa: E731
    lines = [
        f"softmax({fmt(scores)}) = {fmt(softmax_with_temperature(scores))}",
        f"scores / tau (tau = {tau:.4g}) = {fmt(np.asarray(scores) / tau)}",
        f"softmax(scores / tau) = {fmt(softmax_with_temperature(scores, tau))}",
        "",
        f"random q, k ~ N(0, 1), {sweep.num_keys} keys; none = q.k, sqrt_dk = q.k / sqrt(d_k)",
        f"{'d_k':>5} {'var none':>9} {'var sqrt':>9} {'maxp none':>9} {'maxp sqrt':>9} "
        f"{'|J| none':>9} {'|J| sqrt':>9}",
    ]
    for i, d_k in enumerate(sweep.d_k):
        row = [sweep.logit_var[s][i] for s in SCALINGS]
        row += [sweep.max_prob[s][i] for s in SCALINGS]
        row += [sweep.jacobian_norm[s][i] for s in SCALINGS]
        lines.append(f"{d_k:>5d} " + " ".join(f"{v:9.3g}" for v in row))
    return "\n".join(lines)


def _define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    fv = flag_values
    scores = [str(s) for s in SLIDE_SCORES]
    flags.DEFINE_list("scores", scores, "Attention scores to soften.", flag_values=fv)
    flags.DEFINE_float(
        "tau", SLIDE_TAU, "Softmax temperature for the scores (slides: sqrt(5)).", flag_values=fv
    )
    flags.DEFINE_integer(
        "max_log2_dk", 10, "Sweep d_k = 1, 2, 4, ..., 2^max_log2_dk.", flag_values=fv
    )
    flags.DEFINE_integer("num_keys", 16, "Keys per attention row in the sweep.", flag_values=fv)
    flags.DEFINE_integer("samples", 2000, "Random attention rows per d_k.", flag_values=fv)
    flags.DEFINE_integer("seed", 0, "Seed of the random queries and keys.", flag_values=fv)
    define_common_flags("out", flag_values=fv)


@one_line_errors("softmax_temperature")
def main(argv):
    del argv
    f = flags.FLAGS
    try:
        scores = [float(s) for s in f.scores]
    except ValueError as error:
        raise ValueError(f"--scores={f.scores} must be numbers: {error}") from error
    if f.tau <= 0:
        raise ValueError(f"--tau={f.tau} must be > 0")
    if f.max_log2_dk < 0:
        raise ValueError(f"--max_log2_dk={f.max_log2_dk} must be >= 0")
    sweep = scaling_sweep(
        tuple(2**i for i in range(f.max_log2_dk + 1)), f.num_keys, f.samples, f.seed
    )
    print(report(scores, f.tau, sweep))
    print(f"wrote {plot(scores, f.tau, sweep, f.out)}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=parse_flags("softmax_temperature"))
