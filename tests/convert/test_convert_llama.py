"""Llama: tiny random LlamaForCausalLM models, noised, converted and compared
(tests/convert/parity.py), with grouped-query attention (4 query heads, 2 key-value heads), a
rope_theta of 500 (not the default 10000), rms_norm_eps 1e-5 and untied (the module's model)
or tied embeddings.
Tolerances: parity.check_lm_parity's; round-tripped bytes exactly."""

import os
import subprocess
import sys

import numpy as np
import pytest
from parity import (
    check_lm_parity,
    convert,
    import_transformers,
    noised,
    round_trip_differences,
)

from transformer_jax.config import TokenConfig
from transformer_jax.convert import huggingface, llama

VOCAB = 61
SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=32,
    rope_theta=500.0,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
)


def llama_model(tied: bool, seed: int):
    torch, transformers = import_transformers()
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**SIZES, tie_word_embeddings=tied)
    return torch, noised(transformers.LlamaForCausalLM(config), torch, seed=seed)


def word_tokenizer():
    """A tokenizer.json of the words w0 .. w60, split on spaces: id i is "wi"."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {f"w{i}": i for i in range(VOCAB)}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return tokenizer


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    torch, hf_model = llama_model(tied=False, seed=0)
    directory = tmp_path_factory.mktemp("llama")
    hf_dir, run, back = convert(hf_model, directory, tokenizer=word_tokenizer())
    return torch, hf_model, hf_dir, run, back


def test_the_llama_config_is_read_field_by_field(converted):
    cfg = converted[3].model_config
    assert (cfg.attention.num_heads, cfg.attention.kv_heads, cfg.head_dim) == (4, 2, 8)
    assert (cfg.positional.kind, cfg.positional.base) == ("rotary", 500.0)
    assert (cfg.norm.kind, cfg.norm.epsilon, cfg.ffn.activation) == ("rmsnorm", 1e-5, "swiglu")
    assert not cfg.embeddings.tie_output and not cfg.attention.use_bias
    # LlamaConfig has no pad id: id 0 is a real token, not padding.
    assert (cfg.tokens.pad_id, cfg.tokens.bos_id, cfg.tokens.eos_id) == (-1, 1, 2)


def test_converted_llama_matches_hugging_face(converted):
    torch, hf_model, _, run, _ = converted
    check_lm_parity(hf_model, torch, run.model, run.variables, VOCAB)


def test_llama_round_trip_is_bit_exact(converted):
    _, _, hf_dir, _, back = converted
    assert round_trip_differences(hf_dir, huggingface.read_tensors(back)) == []
    assert huggingface.read_config(back) == huggingface.read_config(hf_dir)


def test_generate_on_the_converted_run_continues_as_hugging_face(converted):
    """The command line reads the run's tokenizer.json, prepends BOS and decodes greedily."""
    torch, hf_model, hf_dir, run, back = converted
    assert sorted(os.listdir(back)) == sorted(os.listdir(hf_dir))  # tokenizer.json too
    command = [sys.executable, "-m", "transformer_jax.generate", f"--workdir={run.workdir}"]
    out = subprocess.run(
        [*command, "--input=w5 w9 w17", "--max_new_tokens=6"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    ids = [int(i) for i in out.stdout.split("output:")[1].split("[")[1].split("]")[0].split(",")]
    prompt = torch.tensor([[1, 5, 9, 17]])
    with torch.no_grad():
        theirs = hf_model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=6,
            do_sample=False,
            suppress_tokens=[1],
            eos_token_id=2,
            pad_token_id=2,
        )
    assert ids == theirs[0, 1:].tolist()


def rotary_unpermuted(params, layer: str):
    """`params` with one layer's query and key features in Hugging Face's rotate-half order,
    as a mapping that forgot `llama.rotary_permutation` would leave them."""
    undo = np.argsort(llama.rotary_permutation(8))
    attention = dict(params["decoder"][layer]["self_attention"])
    for name in ("query", "key"):
        kernel = np.asarray(attention[name]["kernel"])  # (D, heads, H)
        attention[name] = {**attention[name], "kernel": kernel[..., undo]}
    decoder = {**params["decoder"], layer: {**params["decoder"][layer]}}
    decoder[layer]["self_attention"] = attention
    return {**params, "decoder": decoder}


def test_a_wrong_llama_mapping_fails_every_comparison(converted):
    """The last layer's query and key features left in Hugging Face's rotary layout: the same
    dot products at position 0, other rotations everywhere else."""
    torch, hf_model, hf_dir, run, _ = converted
    wrong = rotary_unpermuted(run.state.params, "layer_1")
    check_lm_parity(hf_model, torch, run.model, {"params": wrong}, VOCAB, wrong=True)
    assert round_trip_differences(hf_dir, llama.to_tensors(wrong, run.model_config)) != []


def test_tied_llama_converts_and_round_trips(tmp_path):
    torch, hf_model = llama_model(tied=True, seed=1)
    hf_dir, run, back = convert(hf_model, tmp_path)
    assert run.model_config.embeddings.tie_output
    assert "output" not in run.state.params
    check_lm_parity(hf_model, torch, run.model, run.variables, VOCAB)
    assert round_trip_differences(hf_dir, huggingface.read_tensors(back)) == []


def test_token_ids_come_from_the_config():
    defaults = llama.TOKEN_DEFAULTS
    assert huggingface.token_fields({}, defaults) == {
        "tokens.bos_id": 1,
        "tokens.eos_id": 2,
        "tokens.pad_id": -1,
    }
    # A model that pads with EOS: that id stays a real token, padding is masked by the mask.
    pads_with_eos = {"bos_token_id": 7, "eos_token_id": [9], "pad_token_id": 9}
    assert huggingface.token_fields(pads_with_eos, defaults)["tokens.pad_id"] == -1
    with pytest.raises(huggingface.Unsupported, match=r"eos_token_id=\[9, 10\] lists several"):
        huggingface.token_fields({"eos_token_id": [9, 10]}, defaults)
    # Written back only where the original's ids differ, all three then.
    same = TokenConfig(pad_id=-1, bos_id=7, eos_id=9)
    assert huggingface.token_config(same, pads_with_eos, defaults) == {}
    trained_here = TokenConfig()  # PAD 0, BOS 1, EOS 2
    assert huggingface.token_config(trained_here, {}, defaults) == {
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
