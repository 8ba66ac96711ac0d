"""Evaluation by generation: greedy decoding scored by exact match against the targets.

Teacher-forced accuracy feeds the decoder the true previous tokens; here it reads its own, as
at test time (NTHU slides 50-56), so one early mistake costs the whole sequence.
"""

import jax.numpy as jnp

from transformer_jax.decoding.search import greedy, left_to_right
from transformer_jax.decoding.steps import cached_step


def generation_accuracy(variables, batch, *, model) -> dict[str, tuple[jnp.ndarray, jnp.ndarray]]:
    """{"gen_seq_accuracy": (exactly decoded examples, examples)}, float32 sums.

    Decodes batch["inputs"] (B, S) greedily for as many tokens as batch["targets"] (B, T) holds
    (targets, EOS, PAD): a row is correct when the output equals its target row at every
    position, which needs the right EOS and nothing after it. Rows weigh batch["example_weights"]
    (0 for the padding examples of a ragged last batch). Jit it once per batch shape.
    """
    targets_BT = batch["targets"]
    batch_size, target_len = targets_BT.shape
    step, cache = cached_step(
        model, variables, batch_size=batch_size, length=target_len, inputs_BS=batch["inputs"]
    )
    outputs_BT = left_to_right(
        step,
        cache,
        jnp.zeros((batch_size, 0), jnp.int32),
        max_new_tokens=target_len,
        choose=greedy,
        tokens=model.config.tokens,
    )
    correct_B = jnp.all(outputs_BT == targets_BT, axis=1).astype(jnp.float32)
    weights_B = batch["example_weights"].astype(jnp.float32)
    return {"gen_seq_accuracy": (jnp.sum(correct_B * weights_B), jnp.sum(weights_B))}
