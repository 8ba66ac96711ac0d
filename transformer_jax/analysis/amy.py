"""The "Amy" demonstration (NTHU slide 21): without positions, word order is invisible.

  python -m transformer_jax.analysis.amy --out=results/analysis/amy.png
  python -m transformer_jax.analysis.amy --sentence="Amy gave Bob a book" \
      --shuffled="Bob gave Amy a book" --token=Amy --out=amy.png

Self-attention and the position-wise sublayers treat a sentence as a set: permute the input
tokens and, without a positional encoding, the encoder's outputs are permuted the same way and
are otherwise unchanged. "Amy" gets the same vector in "Amy gave Bob a book" and "Bob gave Amy
a book", although she is the giver in one and the receiver in the other. Adding the sinusoidal
encoding (or any other) breaks this: the same token's output now depends on where it sits.

The property holds for any weights, so by default the encoder has random initial weights and a
word-level vocabulary built from the sentence itself. With --workdir the encoder of a trained
encoder-decoder run is used instead, its own tokenizer reading one token per word.
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging

from transformer_jax.analysis.figures import new_figure, save_png
from transformer_jax.analysis.flags import define_common_flags
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.config import AttentionConfig, FeedForwardConfig, ModelConfig, TokenConfig
from transformer_jax.layers.positional import ENCODINGS
from transformer_jax.models import build_model

DEFAULT_SENTENCE = "Amy gave Bob a book"
DEFAULT_SHUFFLED = "Bob gave Amy a book"
# A small random encoder: the property under test does not depend on size or training.
RANDOM_ENCODER = ModelConfig(
    family="encoder_decoder",
    d_model=64,
    attention=AttentionConfig(num_heads=4),
    ffn=FeedForwardConfig(d_ff=128),
    num_encoder_layers=2,
    num_decoder_layers=1,
    dropout_rate=0.0,
)


@dataclasses.dataclass(frozen=True)
class AmyResult:
    """Encoder outputs for a sentence and a permutation of it, with and without positions.

    words: the T tokens of the sentence; shuffled_words[j] = words[perm[j]].
    outputs[kind] = (y_TD for the sentence, y_TD for the shuffled sentence), kind in
      ("none", positional).
    difference[kind][t] = max_d |y[t, d] - y_shuffled[j, d]| where j is where word t moved.
    """

    words: list[str]
    shuffled_words: list[str]
    perm: np.ndarray
    positional: str
    outputs: dict[str, tuple[np.ndarray, np.ndarray]]
    difference: dict[str, np.ndarray]


def permutation(words: list[str], shuffled: list[str]) -> np.ndarray:
    """perm with shuffled[j] == words[perm[j]]; repeated words are matched in order."""
    if sorted(words) != sorted(shuffled):
        raise ValueError(
            f"--shuffled={' '.join(shuffled)!r} must hold the same words as "
            f"--sentence={' '.join(words)!r}, in another order"
        )
    unused = list(range(len(words)))
    perm = []
    for word in shuffled:
        i = next(i for i in unused if words[i] == word)
        unused.remove(i)
        perm.append(i)
    return np.asarray(perm)


def random_shuffle(words: list[str], seed: int) -> list[str]:
    """`words` in a random order other than the given one."""
    perm = np.random.default_rng(seed).permutation(len(words))
    if np.all(perm == np.arange(len(words))):
        perm = np.roll(perm, 1)  # Never the identity, which would show nothing.
    return [words[i] for i in perm]


def word_vocabulary(words: list[str], tokens: TokenConfig) -> dict[str, int]:
    """Each distinct word -> an id, in sorted order, skipping `tokens`' special ids (a PAD
    would be masked out): from 3 with the datasets' PAD 0, BOS 1, EOS 2."""
    special = {tokens.pad, tokens.bos, tokens.eos}
    ids = (i for i in itertools.count() if i not in special)
    return {w: next(ids) for w in sorted(set(words))}


def encoder_outputs(model, variables, ids_T: np.ndarray) -> np.ndarray:
    """The encoder states of one sentence, in inference mode. -> (T, D)."""
    ids_1T = jnp.asarray(ids_T, jnp.int32)[None]
    memory_1TD, _ = model.apply(variables, ids_1T, method=model.encode)
    return np.asarray(memory_1TD[0])


def amy(
    words: list[str],
    shuffled: list[str],
    ids_T: np.ndarray,
    model_config: ModelConfig,
    variables: dict,
    positional: str = "sinusoidal",
) -> AmyResult:
    """Runs the encoder of `model_config` with positional = "none" and = `positional`.

    `variables` must fit both (sinusoidal, rotary, alibi and none have no parameters; a learned
    table is present and simply unused without positions).
    """
    if positional == "none" or positional not in ENCODINGS:
        valid = [p for p in ENCODINGS if p != "none"]
        raise ValueError(f"--positional={positional!r} is not valid; choose one of {valid}")
    if model_config.family != "encoder_decoder":
        raise ValueError(
            f"model.family={model_config.family!r} is not valid here; the Amy demonstration "
            "needs a bidirectional encoder: ['encoder_decoder']"
        )
    max_len = model_config.positional.max_len
    if len(words) > max_len:
        raise ValueError(
            f"--sentence has {len(words)} tokens, more than model.positional.max_len={max_len}"
        )
    perm = permutation(words, shuffled)
    outputs, difference = {}, {}
    for kind in ("none", positional):
        model = build_model(model_config.override({"positional.kind": kind}))
        y_TD = encoder_outputs(model, variables, ids_T)
        y_shuffled_TD = encoder_outputs(model, variables, ids_T[perm])
        # Word perm[j] sits at j in the shuffled sentence: compare y[perm[j]] with y_shuffled[j].
        moved_TD = np.empty_like(y_shuffled_TD)
        moved_TD[perm] = y_shuffled_TD
        outputs[kind] = (y_TD, y_shuffled_TD)
        difference[kind] = np.abs(y_TD - moved_TD).max(axis=-1)
    return AmyResult(list(words), list(shuffled), perm, positional, outputs, difference)


def random_encoder(words: list[str], positional: str, seed: int = 0):
    """Token ids of `words` in their own vocabulary, a random encoder config and its weights."""
    tokens = RANDOM_ENCODER.tokens
    vocab = word_vocabulary(words, tokens)
    # The words' ids and the special ones (3 + words with the datasets' ids).
    used = [*vocab.values(), *(i for i in (tokens.pad, tokens.bos, tokens.eos) if i is not None)]
    config = RANDOM_ENCODER.override(
        {
            "vocab_size": max(used) + 1,
            "positional.max_len": max(len(words), 2),
            "positional.kind": positional,
        }
    )
    ids_T = np.asarray([vocab[w] for w in words], np.int32)
    model = build_model(config)
    ids_1T = jnp.asarray(ids_T)[None]
    # Only the encoder's parameters: the decoder is never run here.
    variables = model.init(jax.random.PRNGKey(seed), ids_1T, method=model.encode)
    variables = {"params": variables["params"]}
    return ids_T, config, variables


def trained_encoder(workdir: str, words: list[str]):
    """Token ids of `words` (one token each) in a run's vocabulary, its config and weights."""
    from transformer_jax.train.restore import load_run  # Reads TFDS: only when asked for.

    run = load_run(workdir)
    ids = []
    for word in words:
        word_ids = run.tokenizer.encode(word)
        if len(word_ids) != 1:
            raise ValueError(
                f"--sentence word {word!r} is {len(word_ids)} tokens {word_ids} in the "
                f"vocabulary of --workdir={workdir}; use words that are one token each"
            )
        ids.append(word_ids[0])
    return np.asarray(ids, np.int32), run.model_config, run.variables


def plot(result: AmyResult, token: str, out: str):
    fig, axes = new_figure(1, 3, width=14.0, height=3.8)
    y_TD, y_shuffled_TD = result.outputs["none"]
    limit = float(max(np.abs(y_TD).max(), np.abs(y_shuffled_TD).max()))
    for ax, y, words, title in (
        (axes[0, 0], y_TD, result.words, "no positions: " + " ".join(result.words)),
        (
            axes[0, 1],
            y_shuffled_TD,
            result.shuffled_words,
            "no positions: " + " ".join(result.shuffled_words),
        ),
    ):
        image = ax.imshow(y, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit)
        ax.set_yticks(range(len(words)), words)
        for tick, word in zip(ax.get_yticklabels(), words, strict=True):
            tick.set_fontweight("bold" if word == token else "normal")
        ax.set_xlabel("output dimension")
        ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=axes[0, 1])
    ax = axes[0, 2]
    x = np.arange(len(result.words))
    # Exact zeros cannot sit on a log axis; they are drawn at the floor.
    floor = 1e-9
    for offset, kind in ((-0.2, "none"), (0.2, result.positional)):
        values = np.maximum(result.difference[kind], floor)
        ax.bar(x + offset, values, width=0.4, label=f"positional = {kind}")
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, None)
    ax.set_xticks(x, result.words)
    ax.set_ylabel("max |y - y_shuffled| of the same token")
    ax.set_title("does a token's output move with it?", fontsize=10)
    ax.legend(fontsize=8)
    return save_png(fig, out)


def report(result: AmyResult, token: str) -> str:
    pos = result.positional
    lines = [
        f"sentence: {' '.join(result.words)}",
        f"shuffled: {' '.join(result.shuffled_words)}",
        f"{'token':>10} {'position':>8} {'shuffled':>8} {'max|diff| none':>15} "
        f"{'max|diff| ' + pos:>20}",
    ]
    inverse = np.argsort(result.perm)
    for t, word in enumerate(result.words):
        mark = " <-" if word == token else ""
        lines.append(
            f"{word:>10} {t:>8d} {inverse[t]:>8d} {result.difference['none'][t]:>15.2e} "
            f"{result.difference[pos][t]:>20.2e}{mark}"
        )
    t = result.words.index(token)
    lines.append(
        f"{token!r}: without positions the outputs differ by {result.difference['none'][t]:.1e} "
        f"(rounding); with {pos} by {result.difference[pos][t]:.2f}"
    )
    return "\n".join(lines)


def demonstrate(
    sentence: str,
    shuffled: str,
    token: str,
    positional: str = "sinusoidal",
    workdir: str | None = None,
    seed: int = 0,
) -> AmyResult:
    """Checks the flags, builds or loads the encoder and runs the comparison."""
    words = sentence.split()
    if len(words) < 2:
        raise ValueError(f"--sentence={sentence!r} needs at least two words to shuffle")
    shuffled_words = shuffled.split() if shuffled else random_shuffle(words, seed)
    permutation(words, shuffled_words)  # Validates before any model is built.
    if token not in words:
        raise ValueError(f"--token={token!r} is not a word of --sentence; valid: {words}")
    if workdir:
        ids_T, config, variables = trained_encoder(workdir, words)
    else:
        ids_T, config, variables = random_encoder(words, positional, seed)
    return amy(words, shuffled_words, ids_T, config, variables, positional)


def _define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    fv = flag_values
    flags.DEFINE_string("sentence", DEFAULT_SENTENCE, "Words separated by spaces.", flag_values=fv)
    flags.DEFINE_string(
        "shuffled",
        DEFAULT_SHUFFLED,
        "The same words in another order; empty: a random order.",
        flag_values=fv,
    )
    flags.DEFINE_string("token", "Amy", "The word whose output vector is followed.", flag_values=fv)
    flags.DEFINE_enum(
        "positional",
        "sinusoidal",
        [p for p in ENCODINGS if p != "none"],
        "The positional encoding to compare against none.",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "seed", 0, "Seed of the random weights and of a random shuffle.", flag_values=fv
    )
    define_common_flags(
        "workdir",
        "out",
        workdir="A trained encoder-decoder run; default: random weights.",
        flag_values=fv,
    )


@one_line_errors("amy")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO.
    f = flags.FLAGS
    sentence, shuffled = f.sentence, f.shuffled
    if f.workdir and f["sentence"].using_default_value:
        # The default sentence is English words; a run's vocabulary may be digits or characters.
        raise ValueError("--workdir needs --sentence (and --shuffled, --token) in its vocabulary")
    result = demonstrate(sentence, shuffled, f.token, f.positional, f.workdir, f.seed)
    print(report(result, f.token))
    print(f"wrote {plot(result, f.token, f.out)}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=parse_flags("amy"))
