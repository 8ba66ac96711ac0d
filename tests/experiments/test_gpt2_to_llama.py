"""experiments/gpt2_to_llama.py: every step of the walk builds, keeps the steps before it, and
has the parameter count its docstring gives; SwiGLU's matches GELU's within 1%."""

import hashlib
import runpy
from pathlib import Path

import jax
import pytest
from ml_collections.config_flags import config_path

from transformer_jax import data, defaults
from transformer_jax.models import build_model
from transformer_jax.sweep import load_sweep
from transformer_jax.train.trainer import resolve_model_config

REPO = Path(__file__).resolve().parents[2]
# Tiny shakespeare's 65 characters: the vocabulary every step is counted with.
CHARACTERS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def sweep_and_counts(tmp_path_factory):
    sweep = load_sweep(str(REPO / "experiments" / "gpt2_to_llama.py"))
    text = CHARACTERS * 40
    path = tmp_path_factory.mktemp("text") / "input.txt"
    path.write_text(text, encoding="utf-8")
    counts, configs = {}, {}
    for step in sweep.variants:
        config = defaults.from_file(str(REPO / sweep.config))
        for key, value in sweep.variants[step].items():
            config_path.set_value(key, config, value)
        config.data.update(path=str(path), sha256=hashlib.sha256(text.encode()).hexdigest())
        model_config = resolve_model_config(config, data.describe_dataset(config.data))
        model = build_model(model_config)
        ids = jax.ShapeDtypeStruct((1, 8), "int32")
        params = jax.eval_shape(model.init, jax.random.PRNGKey(0), ids)["params"]
        counts[step] = sum(x.size for x in jax.tree.leaves(params))
        configs[step] = model_config
    return sweep, counts, configs


def test_each_steps_parameter_count_is_the_documented_one(sweep_and_counts):
    sweep, counts, _ = sweep_and_counts
    module = runpy.run_path(str(REPO / "experiments" / "gpt2_to_llama.py"))
    assert counts == module["PARAMETERS"]
    for step, count in counts.items():
        assert f"| {step} | {count:,} |" in module["__doc__"]
    # SwiGLU's d_ff matches GELU's feed-forward parameters within 1%, the whole model too.
    assert abs(counts["swiglu"] - counts["rotary"]) / counts["rotary"] < 0.01


def test_each_step_keeps_the_ones_before_it(sweep_and_counts):
    _, _, configs = sweep_and_counts
    gpt2, llama = configs["gpt2"], configs["llama"]
    assert (gpt2.norm.kind, gpt2.positional.kind, gpt2.ffn.activation) == (
        "layernorm",
        "learned",
        "gelu",
    )
    assert gpt2.attention.use_bias and gpt2.ffn.use_bias and gpt2.embeddings.has_output_bias
    assert (llama.norm.kind, llama.positional.kind, llama.ffn.activation) == (
        "rmsnorm",
        "rotary",
        "swiglu",
    )
    assert llama.attention.kv_heads == 2 and llama.ffn.d_ff == 170
    assert not (llama.attention.use_bias or llama.ffn.use_bias)
    assert not llama.embeddings.has_output_bias
    assert configs["gqa"].attention.use_bias and configs["swiglu"].attention.kv_heads == 4
