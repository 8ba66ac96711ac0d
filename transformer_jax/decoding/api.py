"""`generate`: decode a batch with a trained model, by greedy search, sampling or beam search."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

from transformer_jax.config import ModelConfig
from transformer_jax.decoding import search
from transformer_jax.decoding.beam import beam_search
from transformer_jax.decoding.memory import check_beam_fits
from transformer_jax.decoding.steps import cached_step
from transformer_jax.families import check_decodable
from transformer_jax.layers.positional import ENCODINGS

STRATEGIES = ("greedy", "sample", "beam")
# Default output length: input length + 50 (the GNMT/tensor2tensor decoding limit). For a
# language model the "input" is the prompt, so the default is 50 new tokens after it.
EXTRA_LENGTH = 50


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """How to choose each output token; validated at construction."""

    strategy: str = "greedy"  # greedy | sample | beam
    temperature: float = 1.0  # sample: logits are divided by it (> 0)
    top_k: int = 0  # sample: keep the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # sample: keep the most likely tokens up to this mass; 1 keeps all
    beam_size: int = 4  # beam: hypotheses kept per example (the paper: 4)
    alpha: float = 0.6  # beam: GNMT length penalty exponent (the paper: 0.6); 0 = none
    max_new_tokens: int = 0  # 0: input length + 50, as far as the model's positions reach

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"strategy={self.strategy!r} is not valid; choose one of {list(STRATEGIES)}"
            )
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(
                f"temperature={self.temperature} must be > 0 and finite (use greedy for 0)"
            )
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k={self.top_k!r} must be an integer >= 0 (0: no top-k)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1] (1: no nucleus filter)")
        if not isinstance(self.beam_size, int) or self.beam_size < 1:
            raise ValueError(f"beam_size={self.beam_size!r} must be an integer >= 1")
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha={self.alpha} must be a finite number >= 0")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            raise ValueError(
                f"max_new_tokens={self.max_new_tokens!r} must be an integer >= 0 "
                "(0: input length + 50)"
            )


def resolve_max_new_tokens(model_config: ModelConfig, config: DecodeConfig, input_len: int) -> int:
    """How many tokens to generate after an input (source or prompt) of `input_len` tokens.

    Encodings that look positions up in a table (`limited_to_table`: sinusoidal, learned) exist
    only below model.positional.max_len, so the decoder's last position (prompt + new tokens - 1)
    must stay below it: the default is capped there, an explicit longer request is an error.
    """
    prompted = check_decodable(model_config).decodes == "prompt"
    prompt_len = input_len if prompted else 0
    positional = model_config.positional
    limit = None
    if ENCODINGS[positional.kind].limited_to_table:
        if input_len > positional.max_len:
            raise ValueError(
                f"the input has {input_len} tokens, more than model.positional.max_len="
                f"{positional.max_len} ({positional.kind} positions); shorten it"
            )
        limit = positional.max_len - prompt_len
        if limit < 1:
            raise ValueError(
                f"the prompt has {prompt_len} tokens, which leaves no room below "
                f"model.positional.max_len={positional.max_len} ({positional.kind} positions); "
                "shorten it"
            )
    if config.max_new_tokens:
        if limit is not None and config.max_new_tokens > limit:
            raise ValueError(
                f"max_new_tokens={config.max_new_tokens} goes past model.positional.max_len="
                f"{positional.max_len} ({positional.kind} positions"
                f"{f', after a {prompt_len}-token prompt' if prompt_len else ''}); "
                f"valid: 1 .. {limit}"
            )
        return config.max_new_tokens
    default = EXTRA_LENGTH if prompted else input_len + EXTRA_LENGTH
    return default if limit is None else min(default, limit)


def make_generate_fn(model, config: DecodeConfig, input_shape: tuple[int, int]):
    """A jitted `fn(variables, inputs_BS, rng) -> tokens` for inputs of one shape.

    `inputs_BS` is the source (encoder-decoder) or the right-padded prompt (decoder-only).
    Tokens are (B, O) outputs for an encoder-decoder and (B, P + O) prompt and continuation for
    a decoder-only model, through EOS, then PAD. Left-padded prompts pass their validity
    (B, P) as a fourth argument (`generate`). Everything is checked here, before
    compiling.
    """
    model_config = model.config
    check_decodable(model_config)
    if config.top_k > model_config.vocab_size:
        raise ValueError(
            f"top_k={config.top_k} exceeds model.vocab_size={model_config.vocab_size}; "
            f"valid: 0 .. {model_config.vocab_size}"
        )
    if len(input_shape) != 2 or min(input_shape) < 1:
        raise ValueError(f"inputs must be (batch, length) token ids, got shape {input_shape}")
    max_new_tokens = resolve_max_new_tokens(model_config, config, input_shape[1])
    return jax.jit(
        functools.partial(_generate, model=model, config=config, max_new_tokens=max_new_tokens)
    )


def generate(
    model,
    variables,
    inputs_BS,
    config: DecodeConfig = DecodeConfig(),
    *,
    rng=None,
    prompt_valid_BP=None,
):
    """Decodes `inputs_BS` (see `make_generate_fn`); `rng` seeds sampling.

    `prompt_valid_BP` (B, P) bool: a decoder-only model's prompts are left-padded, True on
    their real tokens, BOS (where the model has one) the first real token of each (positions
    count from it; no BOS is prepended); greedy search
    and sampling only. None: prompts right-padded with PAD, as before."""
    inputs_BS = jnp.asarray(inputs_BS, jnp.int32)
    rng = jax.random.PRNGKey(0) if rng is None else rng
    if prompt_valid_BP is not None:
        if check_decodable(model.config).decodes != "prompt" or config.strategy == "beam":
            raise ValueError(
                "prompt_valid_BP (left-padded prompts) is for a decoder-only model's greedy "
                f"search or sampling, not model.family={model.config.family!r} with "
                f"strategy={config.strategy!r}"
            )
        prompt_valid_BP = jnp.asarray(prompt_valid_BP, bool)
        if prompt_valid_BP.shape != inputs_BS.shape:
            raise ValueError(
                f"prompt_valid_BP has shape {prompt_valid_BP.shape}; valid: the prompts' "
                f"{inputs_BS.shape}"
            )
        generate_fn = make_generate_fn(model, config, inputs_BS.shape)
        return generate_fn(variables, inputs_BS, rng, prompt_valid_BP)
    generate_fn = make_generate_fn(model, config, inputs_BS.shape)
    if config.strategy == "beam":
        new_tokens = resolve_max_new_tokens(model.config, config, inputs_BS.shape[1])
        prompted = check_decodable(model.config).decodes == "prompt"
        length = (inputs_BS.shape[1] if prompted else 0) + new_tokens
        check_beam_fits(model, variables, inputs_BS, config.beam_size, length)
    return generate_fn(variables, inputs_BS, rng)


def _generate(
    variables,
    inputs_BS,
    rng,
    prompt_valid_BP=None,
    *,
    model,
    config: DecodeConfig,
    max_new_tokens: int,
):
    batch = inputs_BS.shape[0]
    if check_decodable(model.config).decodes == "source":
        source_BS, prompt_BP = inputs_BS, jnp.zeros((batch, 0), jnp.int32)
    else:
        source_BS, prompt_BP = None, inputs_BS
    length = prompt_BP.shape[1] + max_new_tokens
    if config.strategy == "beam":
        beams = config.beam_size
        source_RS = None if source_BS is None else jnp.repeat(source_BS, beams, axis=0)
        step, cache = cached_step(
            model, variables, batch_size=batch * beams, length=length, inputs_BS=source_RS
        )
        tokens, _ = beam_search(
            step,
            cache,
            prompt_BP,
            beam_size=beams,
            alpha=config.alpha,
            max_new_tokens=max_new_tokens,
            tokens=model.config.tokens,
        )
        return tokens
    choose = search.greedy
    if config.strategy == "sample":
        choose = functools.partial(
            search.sample, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p
        )
    step, cache = cached_step(
        model, variables, batch_size=batch, length=length, inputs_BS=source_BS
    )
    return search.left_to_right(
        step,
        cache,
        prompt_BP,
        max_new_tokens=max_new_tokens,
        choose=choose,
        rng=rng,
        tokens=model.config.tokens,
        prompt_valid_BP=prompt_valid_BP,
    )
