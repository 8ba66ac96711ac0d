"""Decoding eval batches into text: one detokenized output per real example, in split order."""

from collections.abc import Callable, Iterable

import jax
import numpy as np

from transformer_jax.data.info import Tokenizer


def decode_to_text(
    generate_fn: Callable, variables, batches: Iterable[dict], tokenizer: Tokenizer
) -> list[str]:
    """The decoded text of every example with example_weights > 0, in order.

    `generate_fn(variables, inputs_BS, rng) -> tokens_BO` comes from `make_generate_fn` for the
    batches' input shape (one compile for all of them); each row is cut at EOS and detokenized.
    """
    texts = []
    for batch in batches:
        tokens_BO = np.asarray(generate_fn(variables, batch["inputs"], jax.random.PRNGKey(0)))
        kept_B = np.asarray(batch["example_weights"]) > 0
        texts += [tokenizer.decode(row) for row in tokens_BO[kept_B]]
    return texts
