"""Token conventions from the config: id 0 is a real token where there is no PAD, and
left-padded prompts decode as their unpadded rows."""

import jax
import jax.numpy as jnp
import numpy as np
from tiny_configs import tiny_model

from transformer_jax import decoding
from transformer_jax.models import build_model

NO_PAD = tiny_model("decoder_only", {"tokens.pad_id": -1, "tokens.bos_id": 5, "tokens.eos_id": 5})


def test_an_id_0_token_moves_no_later_logit_of_another_row():
    model = build_model(NO_PAD)
    ids = jnp.array([[3, 4, 6, 7, 8], [3, 4, 6, 7, 8]], jnp.int32)
    variables = model.init(jax.random.PRNGKey(0), ids)
    zeroed = ids.at[1, 1].set(0)
    logits = model.apply(variables, jnp.concatenate([ids[:1], zeroed[1:]]))
    np.testing.assert_allclose(logits[0], model.apply(variables, ids)[0], atol=1e-6)
    assert np.abs(np.asarray(logits[1, 2:] - logits[0, 2:])).max() > 1e-4  # 0 is read


def test_left_padded_prompts_decode_as_their_unpadded_rows_cached_and_full():
    model = build_model(NO_PAD)
    prompt = jnp.array([[3, 4, 6]], jnp.int32)
    variables = model.init(jax.random.PRNGKey(0), prompt)
    config = decoding.DecodeConfig(max_new_tokens=3)
    alone = decoding.generate(model, variables, prompt, config)
    padded = jnp.array([[9, 5, 3, 4, 6], [5, 7, 3, 4, 6]], jnp.int32)  # 5: BOS after padding
    valid = jnp.array([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    both = decoding.generate(model, variables, padded, config, prompt_valid_BP=valid)
    np.testing.assert_array_equal(both[0, 2:], alone[0])
    step, cache = decoding.full_forward_step(model, variables, batch_size=2, length=8)
    full = decoding.left_to_right(
        step, cache, padded, max_new_tokens=3, tokens=NO_PAD.tokens, prompt_valid_BP=valid
    )
    np.testing.assert_array_equal(full, both)
