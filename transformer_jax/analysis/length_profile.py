"""Where a sequence-to-sequence run stops generalising, position by position, at test lengths.

  python -m transformer_jax.analysis.length_profile \
      --workdir=results/universal_table4/copy/ut_offset/seed_0 --lengths=40,100,200,400 \
      --out=results/universal_table4/copy/profile_ut_offset.png

For each length L the command draws fresh examples of exactly L symbols from the run's own
algorithmic task (copy, reverse or addition, its data.variant) and reads them with teacher
forcing, as the token and sequence accuracies are measured in training. Per target position it
reports:
- accuracy: the fraction of examples whose token at that position is predicted right;
- alignment (copy, reverse): the fraction whose decoder, in some cross-attention head, puts its
  largest weight on the source symbol that position must reproduce (position t for copy,
  L - 1 - t for reverse): the copying mechanism, read directly;
- ponder steps per position, encoder and decoder, for a Universal Transformer with ACT.
A vertical line marks the longest training length. Summed over positions, the accuracies are
the run's token / sequence accuracy at length L, split into the positions seen in training and
the positions past them, which tells a model that fails everywhere at length L (its attention
is diluted over more keys) from one that fails only where positions are new.

Universal Transformers sow one cross-attention per recurrent step; each step counts as a module
here, as each layer does for the Transformer.
"""

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
from absl import app, flags, logging

from transformer_jax.analysis.attention_maps import sown_attention
from transformer_jax.analysis.figures import new_figure, save_png
from transformer_jax.analysis.flags import define_common_flags
from transformer_jax.analysis.ponder import sown_ponder
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.data import algorithmic
from transformer_jax.data.batching import seq2seq_row, stack
from transformer_jax.families import family_of
from transformer_jax.train.restore import load_run

_CHUNK = 16  # examples per forward pass: attention weights at L=400 cost ~40 MB per module


@dataclasses.dataclass(frozen=True)
class LengthProfile:
    """One test length's per-target-position figures: accuracy (T,) with T = L + 1 (EOS
    included), alignment (L,) over the symbols (EOS reproduces no source position)."""

    length: int
    accuracy_T: np.ndarray
    alignment_T: np.ndarray | None  # None for tasks without a fixed source position
    ponder_T: dict[str, np.ndarray]  # stack -> mean ponder steps per position (ACT only)
    seq_accuracy: float
    token_accuracy: float


def examples_of_length(data_cfg, length: int, num_examples: int, seed: int) -> list:
    """`num_examples` (inputs, targets) pairs of the run's task with inputs exactly `length`
    long (addition under the t2t variant: `length` input tokens, as its generator counts)."""
    rng = np.random.default_rng(seed)
    task = data_cfg.name
    if data_cfg.variant == "t2t":
        return algorithmic.t2t_examples(task, rng, num_examples, max_len=length, exact_len=True)
    return algorithmic.generate_examples(
        task,
        rng,
        num_examples,
        min_len=length,
        max_len=length,
        num_symbols=data_cfg.num_symbols,
        reverse_answer=task == "addition" and data_cfg.reverse_answer,
    )


def aligned_source(task: str, length: int) -> np.ndarray | None:
    """(T,) the source position each target position reproduces (EOS: -1), or None."""
    positions = np.arange(length)
    if task == "copy":
        return np.append(positions, -1)
    if task == "reverse":
        return np.append(positions[::-1], -1)
    return None


def _cross_attention_hits(weights: dict[str, np.ndarray], source_T: np.ndarray) -> np.ndarray:
    """(B, T) bool: some head of some cross-attention module (layer or UT step) has its argmax
    on `source_T`. Weights are (B, N, T, S), or (U, B, N, T, S) for a recurrent stack."""
    hits = None
    for name, w in weights.items():
        if "cross" not in name:
            continue
        w_MBNTS = w if w.ndim == 5 else w[None]
        argmax_MBNT = w_MBNTS.argmax(-1)
        hit_BT = (argmax_MBNT == source_T).any(axis=(0, 2))
        hits = hit_BT if hits is None else hits | hit_BT
    if hits is None:
        raise ValueError("the run's model has no cross-attention to align")
    return hits


def profile_length(run, length: int, num_examples: int, seed: int) -> LengthProfile:
    """Reads `num_examples` fresh examples of `length` symbols with teacher forcing."""
    data_cfg = run.config.data
    examples = examples_of_length(data_cfg, length, num_examples, seed)
    input_len = max(len(x) for x, _ in examples)
    target_len = max(len(y) for _, y in examples) + 1
    max_len = run.model_config.positional.max_len
    if max(input_len, target_len) > max_len:
        raise ValueError(
            f"--lengths includes {length}: {max(input_len, target_len)} tokens with EOS, but "
            f"this model reads at most model.positional.max_len={max_len}"
        )
    family = family_of(run.model_config)
    tokens = run.model_config.tokens
    source_T = aligned_source(data_cfg.name, length)
    correct, valid, hits, ponder = [], [], [], {}
    apply = jax.jit(
        lambda variables, args, kwargs: run.model.apply(
            variables, *args, train=False, mutable=["intermediates"], **kwargs
        )
    )
    for start in range(0, num_examples, _CHUNK):
        rows = [
            seq2seq_row(x, y, input_len, target_len, pad_id=tokens.pad, eos_id=tokens.eos)
            for x, y in examples[start : start + _CHUNK]
        ]
        batch = stack(rows, _CHUNK)
        args, kwargs = family.inputs(batch, tokens)
        logits_BTV, state = apply(run.variables, args, kwargs)
        n = len(rows)
        targets_BT = batch["targets"][:n]
        correct.append(np.asarray(logits_BTV).argmax(-1)[:n] == targets_BT)
        valid.append(np.asarray(tokens.valid(targets_BT)))
        if source_T is not None:
            weights = sown_attention(state["intermediates"])
            hits.append(_cross_attention_hits(weights, source_T)[:n])
        for name, (steps_BT, _) in sown_ponder(state["intermediates"]).items():
            ponder.setdefault(name, []).append(steps_BT[:n])
    correct_BT, valid_BT = np.concatenate(correct), np.concatenate(valid)
    counts_T = np.maximum(valid_BT.sum(0), 1)
    return LengthProfile(
        length=length,
        accuracy_T=(correct_BT & valid_BT).sum(0) / counts_T,
        alignment_T=(
            ((np.concatenate(hits) & valid_BT).sum(0) / counts_T)[:length] if hits else None
        ),
        ponder_T={
            name: np.concatenate(parts).mean(0)[: target_len if name == "decoder" else input_len]
            for name, parts in ponder.items()
        },
        seq_accuracy=float((correct_BT | ~valid_BT).all(1).mean()),
        token_accuracy=float((correct_BT & valid_BT).sum() / valid_BT.sum()),
    )


def summary_row(profile: LengthProfile, train_length: int) -> dict:
    """The scalars of one length: accuracies overall and split at the longest training length
    (target positions < train_length were seen in training), alignment, mean ponder steps."""
    acc_T = profile.accuracy_T[: profile.length]  # symbol positions, without EOS
    row = {
        "length": profile.length,
        "token_accuracy": profile.token_accuracy,
        "seq_accuracy": profile.seq_accuracy,
        "token_accuracy_seen": float(acc_T[:train_length].mean()),
        "token_accuracy_new": float(acc_T[train_length:].mean())
        if len(acc_T) > train_length
        else None,
    }
    if profile.alignment_T is not None:
        row["alignment"] = float(profile.alignment_T.mean())
    for name, ponder_T in profile.ponder_T.items():
        row[f"ponder_{name}"] = float(ponder_T.mean())
    return row


def markdown_table(rows: list[dict]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))

    def cell(value):
        return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def plot(profiles: list[LengthProfile], train_length: int, out: str, title: str = ""):
    """Accuracy, alignment and ponder steps against position, one line per test length."""
    panels = [("accuracy", lambda p: {f"L={p.length}": p.accuracy_T})]
    if profiles[0].alignment_T is not None:
        panels.append(("alignment", lambda p: {f"L={p.length}": p.alignment_T}))
    if profiles[0].ponder_T:
        panels.append(
            ("ponder steps", lambda p: {f"{k}, L={p.length}": v for k, v in p.ponder_T.items()})
        )
    fig, axes = new_figure(len(panels), 1, width=8.0, height=2.4 * len(panels))
    for ax, (label, lines) in zip(axes[:, 0], panels, strict=True):
        for profile in profiles:
            for name, values_T in lines(profile).items():
                ax.plot(np.arange(len(values_T)), values_T, label=name, linewidth=1.0)
        ax.axvline(train_length, color="gray", linestyle="--", linewidth=0.8)
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel("position (dashed: the longest training length)")
    if title:
        fig.suptitle(title, fontsize=9)
    return save_png(fig, out)


def _define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    define_common_flags(
        "workdir",
        "step",
        "out",
        required=("workdir", "out"),
        flag_values=flag_values,
        workdir="A run directory of an encoder-decoder model on an algorithmic task.",
        out="Output PNG path; the figures also go to the same path with .json.",
    )
    flags.DEFINE_list(
        "lengths", ["40", "100", "200", "400"], "Input lengths to profile.", flag_values=flag_values
    )
    flags.DEFINE_integer("examples", 64, "Examples per length.", flag_values=flag_values)
    flags.DEFINE_integer("seed", 0, "Seed of the examples drawn.", flag_values=flag_values)


def check_run(run) -> None:
    data_cfg = run.config.data
    if data_cfg.name not in algorithmic.TASKS or family_of(run.model_config).decodes != "source":
        raise ValueError(
            f"--workdir={run.workdir} is a {family_of(run.model_config).name} run on "
            f"data.name={data_cfg.name!r}; length_profile reads encoder-decoder runs on an "
            f"algorithmic task ({', '.join(algorithmic.TASKS)})"
        )


@one_line_errors("length_profile")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO.
    f = flags.FLAGS
    lengths = [int(n) for n in f.lengths]
    if not lengths or min(lengths) < 1 or f.examples < 1:
        raise ValueError(
            f"--lengths={f.lengths} --examples={f.examples}: give positive lengths and examples"
        )
    run = load_run(f.workdir, f.step)
    check_run(run)
    profiles = [profile_length(run, n, f.examples, f.seed) for n in lengths]
    train_length = run.config.data.max_len
    rows = [summary_row(p, train_length) for p in profiles]
    print(markdown_table(rows))
    title = f"{f.workdir} (step {int(run.state.step)}), {f.examples} examples per length"
    png = plot(profiles, train_length, f.out, title)
    figures = {
        "workdir": str(f.workdir),
        "step": int(run.state.step),
        "train_length": train_length,
        "lengths": rows,
        "per_position": {
            p.length: {
                "accuracy": p.accuracy_T.round(4).tolist(),
                **(
                    {"alignment": p.alignment_T.round(4).tolist()}
                    if p.alignment_T is not None
                    else {}
                ),
                **{f"ponder_{k}": v.round(3).tolist() for k, v in p.ponder_T.items()},
            }
            for p in profiles
        },
    }
    Path(png).with_suffix(".json").write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {png} and {Path(png).with_suffix('.json')}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=parse_flags("length_profile"))
