"""Attention maps of a trained run, per layer and head, for one input (NTHU slides 5-9, 41-49).

  python -m transformer_jax.analysis.attention_maps --workdir=runs/copy --input="3 1 4 1 5" \
      --target="3 1 4 1 5" --out=results/analysis/attention_copy.png

Every MultiHeadAttention sows its weights softmax(q k^T / sqrt(d_k)) (B, N, T, S) into the
"intermediates" collection; one forward pass with that collection mutable collects them all.
Its path in that collection names the stack, the layer and the kind of attention:
encoder/layer_0/self_attention, decoder/layer_1/cross_attention, ... Row i of a map is query
token i; its weights over the key tokens sum to 1. Decoder self-attention is lower triangular
(the causal mask, NTHU slides 46-49); cross-attention rows are decoder tokens and columns source
tokens.

What the decoder reads, for encoder-decoder runs: the target shifted right behind BOS (teacher
forcing, exactly as in training) when --target is given; otherwise the model's own greedy
decode. Decoder-only runs read BOS (where the model has one) then --input.
"""

import dataclasses
import re

import jax
import numpy as np
from absl import app, flags, logging

from transformer_jax import decoding
from transformer_jax.analysis import tokens
from transformer_jax.analysis.figures import new_figure, save_png
from transformer_jax.analysis.flags import define_text_input_flags
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.families import FAMILIES, family_of
from transformer_jax.train.restore import load_run


@dataclasses.dataclass(frozen=True)
class AttentionMap:
    """One attention module's weights for one example: (N, T, S), with axis labels."""

    name: str  # e.g. "decoder/layer_1/cross_attention"
    weights_NTS: np.ndarray
    query_labels: list[str]
    key_labels: list[str]


def collect_attention(model, variables, args, kwargs) -> dict[str, np.ndarray]:
    """Runs the model once and returns every sown attention weight (see `sown_attention`)."""
    _, state = model.apply(variables, *args, train=False, mutable=["intermediates"], **kwargs)
    return sown_attention(state["intermediates"])


def sown_attention(intermediates) -> dict[str, np.ndarray]:
    """Every attention weight in an "intermediates" collection, path -> (B, N, T, S), or
    (U, B, N, T, S) for a Universal Transformer's shared block over its U steps."""
    found = {}
    for path, value in jax.tree_util.tree_leaves_with_path(intermediates):
        keys = [str(k.key) for k in path if isinstance(getattr(k, "key", None), str)]
        if keys and keys[-1] == "attention_weights":
            found["/".join(keys[:-1])] = np.asarray(value)
    return dict(sorted(found.items(), key=lambda item: _order(item[0])))


def _order(name: str) -> tuple:
    """Encoder before decoder, layers in numeric order, self- before cross-attention."""
    stack = 0 if name.startswith("encoder") else 1
    layer = re.search(r"layer_(\d+)", name)
    return stack, int(layer.group(1)) if layer else 0, "cross" in name, name


def as_batch(ids: list[int]) -> np.ndarray:
    """One example as a (1, T) int32 batch."""
    return np.asarray([ids], np.int32)


def model_batch(run, input_text: str, target_text: str | None) -> tuple[dict, list[int]]:
    """The one-example batch the model family reads, and the source-side token ids.

    encoder_decoder: inputs = the --input ids; targets = the --target ids (or the greedy decode)
    then EOS. decoder_only: targets = the --input ids then EOS, so the model reads BOS + input.
    encoder_classifier: inputs = the --input ids.
    """
    family = family_of(run.model_config)
    if family.reads_images:
        text_families = [name for name in FAMILIES if not FAMILIES[name].reads_images]
        raise ValueError(
            f"model.family={family.name!r} of the run is not valid here; attention_maps reads "
            f"text inputs: {text_families}"
        )
    tokenizer = run.tokenizer
    input_ids = tokens.encode(tokenizer, input_text, "input")
    max_len = run.model_config.positional.max_len
    # The class token, or BOS before a prompt, takes one position.
    limit = max_len - (1 if family.decodes != "source" else 0)
    if len(input_ids) > limit:
        raise ValueError(
            f"--input has {len(input_ids)} tokens; this model reads at most {limit} "
            f"(model.positional.max_len={max_len})"
        )
    if family.classifier:
        return {"inputs": as_batch(input_ids)}, input_ids
    eos = [] if run.model_config.tokens.eos is None else [run.model_config.tokens.eos]
    if family.decodes == "prompt":
        return {"targets": as_batch(input_ids + eos)}, input_ids
    if target_text is not None:
        target_ids = tokens.encode(tokenizer, target_text, "target")
    else:
        target_ids = greedy_target(run, input_ids)
    if len(target_ids) + 1 > max_len:
        raise ValueError(
            f"--target has {len(target_ids)} tokens; with EOS this model reads at most "
            f"{max_len - 1}"
        )
    batch = {"inputs": as_batch(input_ids), "targets": as_batch(target_ids + eos)}
    return batch, input_ids


def greedy_target(run, input_ids: list[int]) -> list[int]:
    """The model's greedy output for `input_ids` (through `transformer_jax.decoding`), no EOS."""
    tokens_N = np.asarray(decoding.generate(run.model, run.variables, as_batch(input_ids)))[0]
    ids = run.model_config.tokens
    output = [t for t in tokens_N.tolist() if t != ids.pad]
    if ids.eos in output:
        return output[: output.index(ids.eos)]
    # No EOS before the length limit: the decoder read BOS and all but the last token.
    return output[: run.model_config.positional.max_len - 1]


def attention_maps(run, input_text: str, target_text: str | None = None) -> list[AttentionMap]:
    """Every attention map of `run` on one input, in encoder -> decoder, layer order."""
    batch, input_ids = model_batch(run, input_text, target_text)
    family = family_of(run.model_config)
    tokenizer = run.tokenizer
    args, kwargs = family.inputs(batch, run.model_config.tokens)
    sown = collect_attention(run.model, run.variables, args, kwargs)
    source_labels = tokens.labels(tokenizer, input_ids)
    if family.classifier and run.model_config.pooling == "cls":
        source_labels = ["<cls>"] + source_labels
    decoder_labels = []
    if "targets" in batch:
        decoder_labels = tokens.labels(tokenizer, np.asarray(args[-1])[0])  # what it reads
    maps = []
    for name, weights in sown.items():
        reads_source = name.startswith("encoder")
        query_labels = source_labels if reads_source else decoder_labels
        key_labels = source_labels if reads_source or "cross" in name else decoder_labels
        if weights.ndim == 5:  # a Universal Transformer's shared block: one map per step
            for step, weights_BNTS in enumerate(weights, start=1):
                maps.append(
                    AttentionMap(f"{name}/step_{step}", weights_BNTS[0], query_labels, key_labels)
                )
        else:
            maps.append(AttentionMap(name, weights[0], query_labels, key_labels))
    return maps


def plot(maps: list[AttentionMap], out: str, title: str = ""):
    """A grid: one row per attention module, one column per head."""
    num_heads = max(m.weights_NTS.shape[0] for m in maps)
    longest = max(max(m.weights_NTS.shape[1:]) for m in maps)
    cell = min(3.2, max(1.9, 0.16 * longest))
    fig, axes = new_figure(len(maps), num_heads, width=cell * num_heads, height=cell * len(maps))
    for row, attention in enumerate(maps):
        for head in range(num_heads):
            ax = axes[row, head]
            if head >= attention.weights_NTS.shape[0]:
                ax.set_axis_off()
                continue
            image = ax.imshow(attention.weights_NTS[head], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(len(attention.key_labels)), attention.key_labels, fontsize=6)
            ax.set_yticks(range(len(attention.query_labels)), attention.query_labels, fontsize=6)
            ax.tick_params(axis="x", labelrotation=90)
            ax.set_title(f"{short_name(attention.name)} h{head}", fontsize=7)
    fig.colorbar(image, ax=axes, shrink=min(1.0, 3.0 / len(maps)), label="attention weight")
    if title:
        fig.suptitle(title, fontsize=9)
    return save_png(fig, out)


def short_name(name: str) -> str:
    """Shortens e.g. decoder/layer_1/cross_attention to "dec L1 cross" (and a Universal
    Transformer's decoder/recurrence/block/cross_attention/step_2 to "dec cross s2"), to fit
    above a heatmap."""
    for long, short in (
        ("encoder", "enc"),
        ("decoder", "dec"),
        ("/recurrence/block", ""),
        ("_attention", ""),
        ("step_", "s"),
        ("/", " "),
    ):
        name = name.replace(long, short)
    return re.sub(r"layer_(\d+)", r"L\1", name)


def report(maps: list[AttentionMap]) -> str:
    """Per module and head: mean largest weight, mean entropy, each query's argmax key position."""
    lines = []
    for attention in maps:
        num_heads, q_len, k_len = attention.weights_NTS.shape
        lines.append(
            f"{attention.name}: {num_heads} heads x {q_len} queries x {k_len} keys; queries "
            f"{' '.join(attention.query_labels)}; keys {' '.join(attention.key_labels)}"
        )
        for head, weights_TS in enumerate(attention.weights_NTS):
            entropy = -np.sum(weights_TS * np.log(np.maximum(weights_TS, 1e-30)), axis=-1)
            argmax = [str(j) for j in weights_TS.argmax(axis=-1)]
            lines.append(
                f"  h{head}: max weight {weights_TS.max(axis=-1).mean():.2f}, entropy "
                f"{entropy.mean():.2f} nats; argmax key position per query: {' '.join(argmax)}"
            )
    return "\n".join(lines)


def _define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    define_text_input_flags(flag_values)


@one_line_errors("attention_maps")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO.
    f = flags.FLAGS
    run = load_run(f.workdir, f.step)
    maps = attention_maps(run, f.input, f.target)
    decoder = next((m for m in maps if m.name.startswith("decoder")), None)
    if decoder is not None:
        source = "teacher-forced --target" if f.target is not None else "greedy decode"
        if family_of(run.model_config).decodes == "prompt":
            source = "BOS + --input"
        print(f"decoder reads ({source}): {' '.join(decoder.query_labels)}")
    print(report(maps))
    title = f"{f.workdir} (step {int(run.state.step)}): input {f.input!r}"
    print(f"wrote {plot(maps, f.out, title)}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=parse_flags("attention_maps"))
