"""Autoregressive decoding: a key-value cache, greedy search, sampling, beam search.

`generate` decodes a batch with a trained model; `generation_accuracy` scores greedy decoding
by exact match for the trainer; `steps`, `search` and `beam` are the parts, usable alone.
"""

from transformer_jax.decoding.api import (
    STRATEGIES,
    DecodeConfig,
    generate,
    make_generate_fn,
    resolve_max_new_tokens,
)
from transformer_jax.decoding.beam import beam_search, length_penalty
from transformer_jax.decoding.evaluation import generation_accuracy
from transformer_jax.decoding.search import filter_logits, greedy, left_to_right, sample
from transformer_jax.decoding.steps import cached_step, full_forward_step

__all__ = [
    "STRATEGIES",
    "DecodeConfig",
    "beam_search",
    "cached_step",
    "filter_logits",
    "full_forward_step",
    "generate",
    "generation_accuracy",
    "greedy",
    "left_to_right",
    "length_penalty",
    "make_generate_fn",
    "resolve_max_new_tokens",
    "sample",
]
