"""GPT-2: a tiny random GPT2LMHeadModel, noised, converted and compared (tests/convert/parity.py).

Tolerances: parity.check_lm_parity's; round-tripped bytes exactly."""

import pytest
from parity import (
    check_lm_parity,
    convert,
    import_transformers,
    noised,
    round_trip_differences,
    transposed,
)

from transformer_jax.convert import gpt2, huggingface


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    torch, transformers = import_transformers()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=61,
        n_positions=24,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,  # the measurements' PAD (parity.py), masked by the model
    )
    hf_model = transformers.GPT2LMHeadModel(config)
    noised(hf_model, torch)
    hf_dir, run, back = convert(hf_model, tmp_path_factory.mktemp("gpt2"))
    return torch, hf_model, hf_dir, run, back


def test_converted_gpt2_matches_hugging_face(converted):
    torch, hf_model, _, run, _ = converted
    check_lm_parity(hf_model, torch, run.model, run.variables, run.model_config.vocab_size)


def test_gpt2_round_trip_is_bit_exact(converted):
    _, _, hf_dir, _, back = converted
    assert round_trip_differences(hf_dir, huggingface.read_tensors(back)) == []


def test_a_wrong_gpt2_mapping_fails_every_comparison(converted):
    """The last layer's attention output (a D x D Conv1D) transposed, as reading it as an
    nn.Linear would."""
    torch, hf_model, hf_dir, run, _ = converted
    path = ("decoder", "layer_1", "self_attention", "out", "kernel")
    wrong = transposed(run.state.params, path, (32, 32))
    check_lm_parity(hf_model, torch, run.model, {"params": wrong}, 61, wrong=True)
    assert round_trip_differences(hf_dir, gpt2.to_tensors(wrong, run.model_config)) != []


def test_converted_gpt2_takes_its_token_ids_from_config_json(converted):
    _, _, _, run, back = converted
    tokens = run.model_config.tokens
    assert (tokens.pad_id, tokens.bos_id, tokens.eos_id) == (0, 1, 2)
    exported = huggingface.read_config(back)
    assert [exported[f"{name}_token_id"] for name in ("pad", "bos", "eos")] == [0, 1, 2]


def test_gpt2_token_ids_default_to_endoftext_with_no_pad():
    fields = huggingface.token_fields({}, gpt2.TOKEN_DEFAULTS)
    assert fields == {"tokens.pad_id": -1, "tokens.bos_id": 50256, "tokens.eos_id": 50256}
    cfg = gpt2.model_config({"vocab_size": 50257, "n_positions": 8, "n_embd": 8, "n_head": 2})
    assert (cfg.tokens.pad, cfg.tokens.bos, cfg.tokens.eos) == (None, 50256, 50256)
    # A PAD that is also EOS (as fine-tunes set it) would hide the real EOS: none.
    padded = {"pad_token_id": 50256, "bos_token_id": 50256, "eos_token_id": 50256}
    assert huggingface.token_fields(padded, gpt2.TOKEN_DEFAULTS)["tokens.pad_id"] == -1
    with pytest.raises(huggingface.Unsupported, match="eos_token_id"):
        huggingface.token_fields({"eos_token_id": [2, 3]}, gpt2.TOKEN_DEFAULTS)
