"""Beam search with the GNMT length penalty (Wu et al. 2016, §7; the paper: beam 4, alpha 0.6).

A hypothesis y of x scores log P(y | x) / lp(|y|), lp(n) = ((5 + n) / 6)^alpha, so that longer
outputs are not penalised merely for having more factors below 1. Shape letters (see
transformer_jax/__init__.py): B batch, W beams, R = B * W rows of the decoding step, V
vocabulary, L decoder positions (BOS included) + 1.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from transformer_jax.config import TokenConfig
from transformer_jax.decoding.search import filler, initial_sequence, never_special
from transformer_jax.decoding.steps import StepFn

# Finite, so that sums of it stay ordered and never produce NaN (as in the flax examples).
NEG_INF = -1.0e7


def length_penalty(length, alpha: float):
    """lp(n) = ((5 + n) / 6)^alpha for n generated tokens, EOS included."""
    return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


class BeamState(NamedTuple):
    i: jnp.ndarray  # Step: feeds position i, extends with position i + 1.
    alive_seq_BWL: jnp.ndarray  # Live hypotheses, decoder positions (BOS first).
    alive_logp_BW: jnp.ndarray  # Their log-probabilities, best first.
    cache: Any  # The step's cache, rows in the order of the live hypotheses.
    best_seq_BL: jnp.ndarray  # Best finished hypothesis so far.
    best_score_B: jnp.ndarray  # Its length-penalised score (NEG_INF: none yet).
    num_finished_B: jnp.ndarray  # Finished hypotheses so far; W ends the row.


def beam_search(
    step: StepFn,
    cache,
    prompt_BP,
    *,
    beam_size: int,
    alpha: float,
    max_new_tokens: int,
    tokens: TokenConfig,
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The best hypothesis per row. -> tokens (B, P + O) int32, scores (B,) float32.

    `step` and `cache` serve R = B * W rows, row b * W + w being beam w of example b, and hold
    P + O positions; `prompt_BP` is right-padded with PAD and fed as is (its tokens add nothing
    to the score). Each step extends the W live beams by every token and keeps the 2W best
    candidates; an EOS candidate ranked among the first W becomes a finished hypothesis, the W
    best others stay live (the rule of fairseq and Hugging Face; with W = 1 this is greedy
    search). PAD and BOS are never outputs. A row stops once it has W finished hypotheses; the
    result is the best finished one by length-penalised score, or the best live one if none
    finished within O tokens. Tokens hold the prompt, the output through EOS, then PAD
    (`search.filler`: EOS where there is no PAD), as greedy search's. BOS, EOS and PAD are
    `tokens`' (the model's `model.tokens`). Every non-scalar leaf of `cache` has the R rows as
    its leading axis (they are reordered).
    """
    batch, prompt_len = prompt_BP.shape
    length = prompt_len + max_new_tokens
    k = beam_size
    eos = -1 if tokens.eos is None else tokens.eos  # -1: no token ends a hypothesis
    seq_BL, prompt_lengths_B = initial_sequence(prompt_BP, max_new_tokens, tokens)
    rank_12W = jnp.arange(2 * k)[None, :]

    def not_done(state: BeamState):
        return (state.i < length) & ~jnp.all(state.num_finished_B >= k)

    def one_token(state: BeamState) -> BeamState:
        i = state.i
        logits_RV, cache = step(state.cache, state.alive_seq_BWL[:, :, i].reshape(batch * k))
        vocab = logits_RV.shape[-1]
        logp_RV = never_special(jax.nn.log_softmax(logits_RV.astype(jnp.float32)), tokens)
        logp_BWV = logp_RV.reshape(batch, k, vocab)
        in_prompt_B = i < prompt_lengths_B
        prompt_token_B = state.alive_seq_BWL[:, 0, i + 1]
        forced_BWV = jnp.where(
            jnp.arange(vocab)[None, None, :] == prompt_token_B[:, None, None], 0.0, NEG_INF
        )
        logp_BWV = jnp.where(in_prompt_B[:, None, None], forced_BWV, logp_BWV)

        # The 2K best one-token extensions of the live beams.
        candidates_BWV = state.alive_logp_BW[:, :, None] + logp_BWV
        logp_B2K, flat_B2K = jax.lax.top_k(candidates_BWV.reshape(batch, k * vocab), 2 * k)
        parent_B2K, token_B2K = flat_B2K // vocab, flat_B2K % vocab
        seq_B2KL = jnp.take_along_axis(state.alive_seq_BWL, parent_B2K[:, :, None], axis=1)
        seq_B2KL = seq_B2KL.at[:, :, i + 1].set(token_B2K)

        # EOS candidates among the first W finish (skipping NEG_INF placeholders and finished
        # rows, which keep their result).
        done_B = state.num_finished_B >= k
        ends_B2K = (token_B2K == eos) & ~in_prompt_B[:, None]
        finishing_B2K = ends_B2K & (rank_12W < k) & (logp_B2K > NEG_INF / 2) & ~done_B[:, None]
        generated_B = i + 1 - prompt_lengths_B  # Output tokens so far, this EOS included.
        score_B2K = logp_B2K / length_penalty(generated_B, alpha)[:, None]
        score_B2K = jnp.where(finishing_B2K, score_B2K, NEG_INF)
        winner_B = jnp.argmax(score_B2K, axis=1)
        winner_score_B = jnp.take_along_axis(score_B2K, winner_B[:, None], axis=1)[:, 0]
        winner_seq_BL = jnp.take_along_axis(seq_B2KL, winner_B[:, None, None], axis=1)[:, 0]
        improved_B = winner_score_B > state.best_score_B

        # The W best candidates that did not end stay live; their caches follow them.
        alive_logp_BW, keep_BW = jax.lax.top_k(jnp.where(ends_B2K, NEG_INF, logp_B2K), k)
        parent_BW = jnp.take_along_axis(parent_B2K, keep_BW, axis=1)
        rows_R = (jnp.arange(batch)[:, None] * k + parent_BW).reshape(batch * k)
        return BeamState(
            i=i + 1,
            alive_seq_BWL=jnp.take_along_axis(seq_B2KL, keep_BW[:, :, None], axis=1),
            alive_logp_BW=alive_logp_BW,
            cache=jax.tree.map(lambda x: x[rows_R] if x.ndim else x, cache),
            best_seq_BL=jnp.where(improved_B[:, None], winner_seq_BL, state.best_seq_BL),
            best_score_B=jnp.maximum(state.best_score_B, winner_score_B),
            num_finished_B=state.num_finished_B + jnp.sum(finishing_B2K, axis=1),
        )

    state = BeamState(
        i=jnp.int32(0),
        alive_seq_BWL=jnp.broadcast_to(seq_BL[:, None], (batch, k, length + 1)),
        # All beams start as the same sequence; only the first counts until they diverge.
        alive_logp_BW=jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1), jnp.float32), (batch, 1)),
        cache=cache,
        best_seq_BL=jnp.full((batch, length + 1), filler(tokens), jnp.int32),
        best_score_B=jnp.full((batch,), NEG_INF, jnp.float32),
        num_finished_B=jnp.zeros((batch,), jnp.int32),
    )
    state = jax.lax.while_loop(not_done, one_token, state)
    # Nothing finished within the limit: the best live beam, scored at its full length.
    alive_score_B = state.alive_logp_BW[:, 0] / length_penalty(length - prompt_lengths_B, alpha)
    none_finished_B = state.num_finished_B == 0
    best_seq_BL = jnp.where(none_finished_B[:, None], state.alive_seq_BWL[:, 0], state.best_seq_BL)
    best_score_B = jnp.where(none_finished_B, alive_score_B, state.best_score_B)
    return best_seq_BL[:, 1:], best_score_B
