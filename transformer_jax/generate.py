"""Command line: decode with the latest checkpoint of a training run.

  python -m transformer_jax.generate --workdir=runs/copy --input="0 1 2 3"
  python -m transformer_jax.generate --workdir=runs/char_lm --input="The " --strategy=sample \
      --temperature=0.8 --top_p=0.9 --max_new_tokens=200

--input is text in the dataset's tokenizer: the source of a seq2seq run, the prompt of a
language model. For symbol vocabularies without a space (the algorithmic tasks), spaces between
symbols are dropped. Prints the output text and its token ids.
"""

import jax
import jax.numpy as jnp
from absl import app, flags, logging

from transformer_jax import decoding
from transformer_jax.analysis import tokens
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.families import family_of
from transformer_jax.train.restore import load_run

_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory written by transformer_jax.main.")
_INPUT = flags.DEFINE_string("input", None, "Source text (seq2seq) or prompt (language model).")
_STRATEGY = flags.DEFINE_enum("strategy", "greedy", list(decoding.STRATEGIES), "How to decode.")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "sample: logits are divided by it.")
_TOP_K = flags.DEFINE_integer("top_k", 0, "sample: keep the k most likely tokens; 0 keeps all.")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "sample: nucleus mass kept; 1 keeps all.")
_BEAM_SIZE = flags.DEFINE_integer("beam_size", 4, "beam: hypotheses per step.")
_ALPHA = flags.DEFINE_float("alpha", 0.6, "beam: GNMT length penalty exponent.")
_MAX_NEW_TOKENS = flags.DEFINE_integer(
    "max_new_tokens", 0, "Tokens to generate at most; 0: input length + 50 (within max_len)."
)
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
flags.mark_flags_as_required(["workdir", "input"])


@one_line_errors("generate")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO.
    config = decoding.DecodeConfig(
        strategy=_STRATEGY.value,
        temperature=_TEMPERATURE.value,
        top_k=_TOP_K.value,
        top_p=_TOP_P.value,
        beam_size=_BEAM_SIZE.value,
        alpha=_ALPHA.value,
        max_new_tokens=_MAX_NEW_TOKENS.value,
    )
    run = load_run(_WORKDIR.value)
    tokenizer = run.tokenizer
    ids = tokens.encode(tokenizer, _INPUT.value, field="input")
    inputs = jnp.asarray([ids], jnp.int32)
    generated = decoding.generate(
        run.model, run.variables, inputs, config, rng=jax.random.PRNGKey(_SEED.value)
    )
    output = [int(t) for t in generated[0]]
    # Drop what fills the row after the first EOS generated (a decoder-only row holds the
    # prompt first).
    eos = run.model_config.tokens.eos
    start = len(ids) if family_of(run.model_config).decodes == "prompt" else 0
    if eos in output[start:]:
        output = output[: output.index(eos, start) + 1]
    print(f"input:  {tokenizer.decode(ids)}  {ids}")
    print(f"output: {tokenizer.decode(output)}  {output}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("generate"))
