"""Per-position ponder steps of a Universal Transformer with ACT, for one input.

  python -m transformer_jax.analysis.ponder --workdir=runs/reverse_act --input="3 1 4 1 5" \
      --out=results/analysis/ponder_reverse.png

Every universal stack with `act=True` sows, per position, the number of steps N it ran before
halting and its remainder R ("intermediates" ponder_steps, ponder_remainders, (B, T)); one
forward pass collects them (Dehghani et al. 2019, Fig. 3-4; Graves 2016). The figure has one row
per stack (encoder, decoder), one cell per token, coloured by the ponder time N + R and labelled
with N. The decoder reads the same sequence as in `attention_maps` (the --target teacher-forced,
or the greedy decode; BOS + --input for decoder-only runs).
"""

import dataclasses

import numpy as np
from absl import app, flags, logging

from transformer_jax.analysis import tokens
from transformer_jax.analysis.attention_maps import model_batch
from transformer_jax.analysis.figures import new_figure, save_png
from transformer_jax.analysis.flags import define_text_input_flags
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.families import family_of
from transformer_jax.train.restore import load_run


@dataclasses.dataclass(frozen=True)
class PonderMap:
    """One stack's ponder steps N and remainders R for one example, (T,) each."""

    name: str  # "encoder" or "decoder"
    steps_T: np.ndarray
    remainders_T: np.ndarray
    labels: list[str]


def collect_ponder(model, variables, args, kwargs) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Runs the model once: stack name -> (ponder steps, remainders), each (B, T)."""
    _, state = model.apply(variables, *args, train=False, mutable=["intermediates"], **kwargs)
    return sown_ponder(state["intermediates"])


def sown_ponder(intermediates) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Stack name -> (ponder steps, remainders), each (B, T), from an "intermediates"
    collection; empty for models without ACT."""
    found = {}
    for name, sown in intermediates.items():
        if isinstance(sown, dict) and "ponder_steps" in sown:
            found[name] = (
                np.asarray(sown["ponder_steps"][0]),
                np.asarray(sown["ponder_remainders"][0]),
            )
    return found


def ponder_maps(run, input_text: str, target_text: str | None = None) -> list[PonderMap]:
    """The ponder steps of every ACT stack of `run` on one input, encoder first."""
    cfg = run.model_config
    if cfg.universal is None or not cfg.universal.act:
        raise ValueError(
            f"the run has model.universal={cfg.universal}; ponder maps need a Universal "
            "Transformer with ACT (model.universal.enabled=True, model.universal.act=True)"
        )
    batch, input_ids = model_batch(run, input_text, target_text)
    family = family_of(cfg)
    args, kwargs = family.inputs(batch, cfg.tokens)
    found = collect_ponder(run.model, run.variables, args, kwargs)
    source_labels = tokens.labels(run.tokenizer, input_ids)
    if family.classifier and cfg.pooling == "cls":
        source_labels = ["<cls>"] + source_labels
    maps = []
    for name in sorted(found, key=lambda n: n != "encoder"):
        steps_BT, remainders_BT = found[name]
        labels = source_labels
        if name == "decoder":
            labels = tokens.labels(run.tokenizer, np.asarray(args[-1])[0])  # the decoder's
        maps.append(PonderMap(name, steps_BT[0], remainders_BT[0], labels))
    return maps


def plot(maps: list[PonderMap], out: str, max_steps: int, title: str = ""):
    """One row per stack: cells coloured by N + R, labelled with N."""
    longest = max(len(m.labels) for m in maps)
    fig, axes = new_figure(len(maps), 1, width=max(4.0, 0.45 * longest), height=1.6 * len(maps))
    for row, ponder in enumerate(maps):
        ax = axes[row, 0]
        rho_1T = (ponder.steps_T + ponder.remainders_T)[None]
        image = ax.imshow(rho_1T, cmap="magma", vmin=0.0, vmax=max_steps + 1.0, aspect="auto")
        for t, n in enumerate(ponder.steps_T):
            ax.text(t, 0, f"{int(n)}", ha="center", va="center", fontsize=7, color="cyan")
        ax.set_xticks(range(len(ponder.labels)), ponder.labels, fontsize=7)
        ax.set_yticks([0], [ponder.name], fontsize=8)
    fig.colorbar(image, ax=axes, label="ponder time N + R (cells: steps N)")
    if title:
        fig.suptitle(title, fontsize=9)
    return save_png(fig, out)


def report(maps: list[PonderMap]) -> str:
    return "\n".join(
        f"{m.name}: steps {' '.join(str(int(n)) for n in m.steps_T)} (mean "
        f"{m.steps_T.mean():.2f}, max {int(m.steps_T.max())}); tokens {' '.join(m.labels)}"
        for m in maps
    )


def _define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    define_text_input_flags(
        flag_values,
        workdir="A run directory of a universal=True, act=True model.",
    )


@one_line_errors("ponder")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO.
    f = flags.FLAGS
    run = load_run(f.workdir, f.step)
    maps = ponder_maps(run, f.input, f.target)
    print(report(maps))
    cfg = run.model_config
    max_steps = cfg.universal.num_steps(max(cfg.num_encoder_layers, cfg.num_decoder_layers))
    title = f"{f.workdir} (step {int(run.state.step)}): input {f.input!r}"
    print(f"wrote {plot(maps, f.out, max_steps, title)}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=parse_flags("ponder"))
