"""Left-to-right decoding, one token per step: greedy search and sampling.

At test time the decoder reads its own previous output (NTHU slides 50-56): BOS first (where
the model's tokens have one, `model.tokens`), then each chosen token, until EOS (where there is
one). Rows that emitted EOS get PAD (EOS where there is no PAD) from then on, and the loop stops
when every row has finished or after `max_new_tokens`.
"""

import jax
import jax.numpy as jnp

from transformer_jax.config import TokenConfig
from transformer_jax.decoding.steps import StepFn

_NEG_INF = float(jnp.finfo(jnp.float32).min)


def never_special(logits_BV, tokens: TokenConfig):
    """PAD and BOS, where `tokens` has them, are never outputs (as in fairseq): their logits
    become float32 min. A BOS that is also EOS (GPT-2's one special token) stays an output.

    PAD means "after the end" and BOS "before the start"; an untrained model may still rank them
    first. Applied after log_softmax in beam search, so scores stay the model's log-probs.
    """
    banned = [i for i in (tokens.pad, tokens.bos) if i is not None and i != tokens.eos]
    return logits_BV.at[:, jnp.array(banned, jnp.int32)].set(_NEG_INF) if banned else logits_BV


def filler(tokens: TokenConfig) -> int:
    """What a finished row holds after its EOS: PAD, or EOS where there is no PAD."""
    if tokens.pad is not None:
        return tokens.pad
    return tokens.eos if tokens.eos is not None else 0  # never finishes without an EOS


def greedy(logits_BV, rng):
    """The most likely token. -> (B,) int32."""
    del rng
    return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)


def filter_logits(logits_BV, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
    """Logits of the sampling distribution: divided by `temperature`, then truncated. -> (B, V).

    top_k >= 1 keeps the k most likely tokens (Fan et al. 2018); top_p < 1 keeps the smallest
    set of most likely tokens whose probability reaches top_p (nucleus sampling, Holtzman et al.
    2020). Both together keep the intersection. Removed tokens get a logit of float32 min.
    """
    logits_BV = logits_BV.astype(jnp.float32) / temperature
    if top_k:
        kth_largest_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
        logits_BV = jnp.where(logits_BV < kth_largest_B1, _NEG_INF, logits_BV)
    if top_p < 1.0:
        sorted_BV = jnp.sort(logits_BV, axis=-1)[:, ::-1]
        probs_BV = jax.nn.softmax(sorted_BV, axis=-1)
        # A token is kept while the mass of the tokens ranked above it is still below top_p;
        # the most likely token is always kept.
        kept_BV = jnp.cumsum(probs_BV, axis=-1) - probs_BV < top_p
        threshold_B1 = jnp.min(jnp.where(kept_BV, sorted_BV, jnp.inf), axis=-1, keepdims=True)
        logits_BV = jnp.where(logits_BV < threshold_B1, _NEG_INF, logits_BV)
    return logits_BV


def sample(logits_BV, rng, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
    """A token drawn from softmax(filter_logits(logits)). -> (B,) int32."""
    filtered_BV = filter_logits(logits_BV, temperature=temperature, top_k=top_k, top_p=top_p)
    return jax.random.categorical(rng, filtered_BV, axis=-1).astype(jnp.int32)


def initial_sequence(prompt_BP, max_new_tokens: int, tokens: TokenConfig):
    """The decoder-input buffer BOS, prompt, then PAD (`filler`) -> (B, P + O + 1) int32, and
    the prompt lengths (B,) (the tokens of the right-padded prompt that are not PAD)."""
    if tokens.bos is None:
        raise ValueError(
            "this search starts every row with BOS, and model.tokens.bos_id=-1 (none); valid: "
            "a model with a BOS id, or left_to_right (which starts from the prompt)"
        )
    batch, prompt_len = prompt_BP.shape
    seq_BL = jnp.full((batch, prompt_len + max_new_tokens + 1), filler(tokens), jnp.int32)
    seq_BL = seq_BL.at[:, 0].set(tokens.bos)
    seq_BL = seq_BL.at[:, 1 : 1 + prompt_len].set(prompt_BP.astype(jnp.int32))
    return seq_BL, jnp.sum(tokens.valid(prompt_BP), axis=1)


def left_to_right(
    step: StepFn,
    cache,
    prompt_BP,
    *,
    max_new_tokens: int,
    tokens: TokenConfig,
    choose=greedy,
    rng=None,
    prompt_valid_BP=None,
) -> jnp.ndarray:
    """Decodes [BOS,] prompt, then up to `max_new_tokens` chosen tokens. -> (B, P + O) int32.

    `tokens` is the model's `model.tokens`: its BOS, EOS and PAD are the ones used here.

    `prompt_BP` is right-padded with PAD (P may be 0, as for an encoder-decoder); a row's prompt
    tokens are fed as they are (teacher forcing), so prompts of different lengths decode in one
    batch. With `prompt_valid_BP` (B, P) the prompt is left-padded instead: every row's prompt
    ends at P, its padding is fed masked (`step(cache, ids_B, valid_B)`, positions from the
    mask, as `cached_step` and `full_forward_step` take it), and the prompt carries its own
    BOS after its padding (none is prepended). Otherwise BOS is fed first only where `tokens`
    has one (without, P must be >= 1); generation stops at EOS only where there is one.
    `choose(logits_BV, rng) -> (B,)` picks each new token (`greedy`, or `sample` with its
    options bound); step k uses fold_in(rng, k). The result holds the prompt, the generated
    tokens through EOS, then PAD (`filler`); PAD and BOS are never chosen. `step` and `cache`
    must hold [1 +] P + O - 1 positions ([1 +]: BOS where there is one).
    """
    batch, prompt_len = prompt_BP.shape
    # Decoder positions before the prompt: BOS, except before left padding, which must come
    # first (a left-padded prompt carries its own BOS after its padding).
    start = 0 if tokens.bos is None or prompt_valid_BP is not None else 1
    if start == 0 and prompt_len == 0:
        raise ValueError("model.tokens.bos_id=-1 (no BOS): decoding needs a prompt to start from")
    rng = jax.random.PRNGKey(0) if rng is None else rng
    # seq_BL[:, k] is the decoder input at position k; position k + 1 is chosen at step k.
    seq_BL = jnp.full((batch, start + prompt_len + max_new_tokens), filler(tokens), jnp.int32)
    if start:
        seq_BL = seq_BL.at[:, 0].set(tokens.bos)
    seq_BL = seq_BL.at[:, start : start + prompt_len].set(prompt_BP.astype(jnp.int32))
    valid_BL = jnp.ones(seq_BL.shape, bool)
    if prompt_valid_BP is None:
        prompt_lengths_B = jnp.sum(tokens.valid(prompt_BP), axis=1)
    else:
        prompt_lengths_B = jnp.full((batch,), prompt_len, jnp.int32)
        valid_BL = valid_BL.at[:, start : start + prompt_len].set(prompt_valid_BP)
    last = seq_BL.shape[1] - 1  # the last position chosen is fed to no step

    def not_done(state):
        k, _, _, finished_B = state
        return (k < last) & ~jnp.all(finished_B)

    def one_token(state):
        k, seq_BL, cache, finished_B = state
        if prompt_valid_BP is None:  # every fed token is real: the plain step signature
            logits_BV, cache = step(cache, seq_BL[:, k])
        else:
            logits_BV, cache = step(cache, seq_BL[:, k], valid_BL[:, k] & ~finished_B)
        token_B = choose(never_special(logits_BV, tokens), jax.random.fold_in(rng, k))
        in_prompt_B = k + 1 < start + prompt_lengths_B
        token_B = jnp.where(in_prompt_B, seq_BL[:, k + 1], token_B)
        token_B = jnp.where(finished_B, filler(tokens), token_B)
        if tokens.eos is not None:
            finished_B = finished_B | (~in_prompt_B & (token_B == tokens.eos))
        return k + 1, seq_BL.at[:, k + 1].set(token_B), cache, finished_B

    state = (jnp.int32(0), seq_BL, cache, jnp.zeros((batch,), bool))
    _, seq_BL, _, _ = jax.lax.while_loop(not_done, one_token, state)
    return seq_BL[:, start:]
