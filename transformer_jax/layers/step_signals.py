"""The Universal Transformer's step ("vertical") timing signal: what tells the shared block
which recurrent step it is computing (Dehghani et al. 2019, §2.1, "coordinate embeddings").

`STEP_SIGNALS` maps `model.universal.step_signal` to a function
`(module, num_steps, d_model) -> (num_steps, D)` whose row t - 1 is added before step t = 1..T.
Both signals are tables indexed by the step number t, read at rows 1..T (row 0, step 0, is
never read), so that switching between them changes the values and nothing else:
  sinusoidal  the fixed sinusoidal table (`sinusoidal_table`), what the paper describes;
  learned     a learned (T + 1, D) table, tensor2tensor's default (`step_timing_signal_type =
              "learned"`, models/research/universal_transformer.py,
              update_hparams_for_universal_transformer), initialised and scaled as its
              layers/common_attention.py get_layer_timing_signal_learned_1d does: entries
              drawn from N(0, D^-1/2 squared) and multiplied by sqrt(D), so the signal starts at
              unit scale and Adam's steps act on it sqrt(D) times more strongly.
"""

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax.layers.positional import sinusoidal_table
from transformer_jax.registry import Registry

STEP_SIGNALS = Registry("model.universal.step_signal")


@STEP_SIGNALS.register("sinusoidal")
def sinusoidal_steps(module: nn.Module, num_steps: int, d_model: int) -> jnp.ndarray:
    """Rows 1..T of the sinusoidal table. -> (T, D); no parameters."""
    del module
    return jnp.asarray(sinusoidal_table(num_steps + 1, d_model)[1:])


@STEP_SIGNALS.register("learned")
def learned_steps(module: nn.Module, num_steps: int, d_model: int) -> jnp.ndarray:
    """Rows 1..T of a learned (T + 1, D) table, parameter "step_embedding". -> (T, D)."""
    table_SD = module.param(
        "step_embedding",
        nn.initializers.normal(stddev=d_model**-0.5),
        (num_steps + 1, d_model),
        jnp.float32,
    )
    return table_SD[1:] * d_model**0.5
