"""A run directory written before the token conventions became per tokenizer still loads and
decodes as it did.

tests/fixtures/legacy_char_lm holds config.json, tokenizer.json and the orbax checkpoint of a
20-step character LM trained at commit 3d16db8 (PAD 0, BOS 1, EOS 2 hard-wired), written by

  python -m transformer_jax.main --config=configs/char_lm.py:quick --workdir=legacy_char_lm \
      --config.data.path=corpus.txt --config.model.d_model=16 \
      --config.model.num_decoder_layers=1 --config.model.ffn.d_ff=32 \
      --config.model.attention.num_heads=2 --config.data.seq_len=16 --config.train.steps=20 \
      --config.train.warmup_steps=5 --config.train.eval_every=20 \
      --config.train.checkpoint_every=20 --config.data.batch_size=8

(corpus.txt: the first 600 characters of pydoc's "if" topic; config.json's data.path names it
without its directory). decoded_at_creation.json is what that commit's `generate` (greedy, 8 new
tokens) and forward pass gave for two prompts.
"""

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax import decoding
from transformer_jax.train.restore import load_run

FIXTURE = Path(__file__).parent / "fixtures" / "legacy_char_lm"


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("legacy") / "run"
    shutil.copytree(FIXTURE, workdir)  # a copy: loading must not write into the fixture
    expected = json.loads((FIXTURE / "decoded_at_creation.json").read_text())
    return load_run(str(workdir)), expected


def test_legacy_run_keeps_its_token_conventions(legacy):
    run, expected = legacy
    tokens = run.model.config.tokens
    assert (tokens.pad_id, tokens.bos_id, tokens.eos_id) == (0, 1, 2)
    ids = [run.tokenizer.encode(prompt) for prompt in expected["prompts"]]
    assert ids == expected["prompt_ids"]


def test_legacy_run_decodes_and_scores_as_before(legacy):
    run, expected = legacy
    inputs = jnp.asarray(expected["prompt_ids"], jnp.int32)
    generated = decoding.generate(
        run.model, run.variables, inputs, decoding.DecodeConfig(max_new_tokens=8)
    )
    np.testing.assert_array_equal(np.asarray(generated), expected["greedy"])
    logits = run.model.apply(run.variables, inputs)
    np.testing.assert_allclose(logits, expected["logits"], rtol=1e-5, atol=1e-5)
