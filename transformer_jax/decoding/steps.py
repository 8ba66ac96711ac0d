"""A model as a decoding step, `step(cache, ids_B) -> (logits_BV, cache)`, cached or not.

The search loops (`search.py`, `beam.py`) only see this interface, so they work the same with a
key-value cache, with a full re-forward (the reference and the benchmark baseline) or with a
hand-built model in tests. Step k feeds the decoder input at position k (BOS at 0) and returns
float32 logits for the token at position k + 1. Every array has a fixed size, so a loop over
steps compiles once.
"""

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from transformer_jax.families import check_decodable
from transformer_jax.models.stack import mask_positions

# (cache, ids_B[, valid_B]) -> (logits_BV float32, cache): one decoder position for every row;
# valid_B (default: model.tokens.valid) False feeds a row's token as padding (left padding).
StepFn = Callable[..., tuple[jnp.ndarray, Any]]


def cached_step(model, variables, *, batch_size: int, length: int, inputs_BS=None):
    """Incremental decoding with a key-value cache (NTHU slides 50-56). -> (step, cache).

    `length` is the number of decoder positions the cache holds (BOS included). For an
    encoder-decoder `inputs_BS` (B, S) is the source: the encoder runs here, once, and the
    cross-attention keys and values are projected once, when the cache is created. Each step
    then costs one token's worth of projections plus attention over the cache.
    """
    family = check_decodable(model.config)
    model = model.clone(use_cache=True)
    if family.decodes == "source":
        memory_BSD, memory_valid_BS = model.apply(variables, inputs_BS, method="encode")
        extra_args, method = (memory_BSD, memory_valid_BS), "decode"
    else:
        extra_args, method = (), "__call__"

    # Creating the cache is one ordinary pass over `length` placeholder tokens; under jit only
    # what the cache keeps survives (zeros, and the projected encoder output).
    placeholder_BL = jnp.zeros((batch_size, length), jnp.int32)
    _, cache = model.apply(variables, placeholder_BL, *extra_args, method=method, mutable=["cache"])

    def step(cache, ids_B, valid_B=None):
        valid = {} if valid_B is None else {"valid_BT": valid_B[:, None]}
        logits_B1V, cache = model.apply(
            {**variables, **cache},
            ids_B[:, None],
            *extra_args,
            **valid,
            method=method,
            mutable=["cache"],
        )
        return logits_B1V[:, 0], cache

    return step, cache


def full_forward_step(model, variables, *, batch_size: int, length: int, inputs_BS=None):
    """The uncached reference: every step re-runs the whole model on a (B, length) buffer.

    The buffer holds the tokens fed so far and padding (masked out) after them, so the step's
    shape never changes; causal masking makes the logits at position k those of the prefix.
    Tokens fed as padding (`valid_B` False: left padding) are masked too, and positions count
    the real tokens before each one (`mask_positions`), as the cache does. The "cache" is
    (k, buffer, validity). Quadratically more work than `cached_step`.
    """
    encoder_decoder = check_decodable(model.config).decodes == "source"
    tokens = model.config.tokens

    def step(state, ids_B, valid_B=None):
        k, buffer_BL, valid_BL = state
        buffer_BL = buffer_BL.at[:, k].set(ids_B)
        valid_BL = valid_BL.at[:, k].set(tokens.valid(ids_B) if valid_B is None else valid_B)
        positions_BL = mask_positions(valid_BL)
        if encoder_decoder:
            memory_BSD, memory_valid_BS = model.apply(variables, inputs_BS, method="encode")
            args = (buffer_BL, memory_BSD, memory_valid_BS)
            logits_BLV = model.apply(
                variables, *args, valid_BT=valid_BL, positions_BT=positions_BL, method="decode"
            )
        else:
            logits_BLV = model.apply(
                variables, buffer_BL, valid_BT=valid_BL, positions_BT=positions_BL
            )
        return logits_BLV[:, k], (k + 1, buffer_BL, valid_BL)

    empty_BL = jnp.zeros((batch_size, length), jnp.int32)
    return step, (jnp.int32(0), empty_BL, jnp.zeros((batch_size, length), bool))
