"""A converted model as an ordinary run directory (docs/runs.md), and back.

The run directory holds what `transformer_jax.train.restore.load_run` reads: config.json (the
model, the default train config, no dataset), one orbax checkpoint at step 0 (the converted
parameters and a fresh optimizer state), the tokenizer where the Hugging Face directory has one
(tokenizer.json's "huggingface" kind), and under HF_DIR the model directory's own config.json and
side files plus CONVERSION_FILE, so that --to_hf writes back the same directory.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax import fields as F
from transformer_jax import run_dir
from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.convert import huggingface
from transformer_jax.families import family_of
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.checkpoint import Checkpointer
from transformer_jax.train.optimizer import make_optimizer

# HF_DIR/CONVERSION_FILE: {"architecture": its class name, "dtype": the checkpoint's dtype}.
CONVERSION_FILE = "conversion.json"
# config.json's data section: a converted run was trained on data this project does not have.
NO_DATA = {"name": "none (converted from Hugging Face)"}


def write_run(
    workdir: str, cfg: ModelConfig, params: dict, *, architecture: str, dtype: str, source: str
) -> None:
    """Writes the run directory `workdir` (which must not hold a run) for `params`."""
    if run_dir.read_config(workdir) is not None or run_dir.has_checkpoints(workdir):
        raise ValueError(f"--workdir={workdir} already holds a run; convert into a new --workdir")
    model = build_model(cfg)
    train_cfg = TrainConfig()
    optimizer = make_optimizer(train_cfg, cfg.d_model)
    sample = family_of(cfg).example_batch(cfg)
    abstract = jax.eval_shape(
        lambda: steps.init_state(model, optimizer, sample, jax.random.PRNGKey(0))
    )
    _check_tree(params, abstract.params)
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    # Built from the abstract state, never by running the model's init: a real checkpoint's
    # max_len (Llama's max_position_embeddings) would make that forward pass enormous.
    state = steps.TrainState(
        step=jnp.int32(0),
        params=params,
        batch_stats={},
        opt_state=optimizer.init(params),
        rng=jax.random.split(jax.random.PRNGKey(0))[1],
    )
    os.makedirs(workdir, exist_ok=True)
    side = os.path.join(workdir, huggingface.HF_DIR)
    huggingface.copy_side_files(source, side)
    run_dir.write_json(
        os.path.join(side, CONVERSION_FILE), {"architecture": architecture, "dtype": dtype}
    )
    if os.path.exists(os.path.join(side, "tokenizer.json")):
        spec = {"kind": "huggingface", "path": f"{huggingface.HF_DIR}/tokenizer.json"}
        run_dir.write_json(os.path.join(workdir, run_dir.TOKENIZER_FILE), spec)
    resolved = {"data": NO_DATA, "model": cfg.to_dict(), "seed": 0, "train": train_cfg.to_dict()}
    run_dir.write_config(workdir, resolved)
    with Checkpointer(workdir, every=1, keep=1) as checkpointer:
        checkpointer.save(0, state, force=True)


def _check_tree(params: dict, expected) -> None:
    """The converted tree must be the model's, leaf for leaf and shape for shape."""
    got = {
        jax.tree_util.keystr(p): np.shape(x) for p, x in jax.tree_util.tree_leaves_with_path(params)
    }
    want = {
        jax.tree_util.keystr(p): tuple(x.shape)
        for p, x in jax.tree_util.tree_leaves_with_path(expected)
    }
    if got != want:
        missing = sorted(set(want) - set(got)) or sorted(k for k in got if got[k] != want.get(k))
        raise AssertionError(f"converted parameters do not match the model's tree: {missing[:3]}")


def read_conversion(workdir: str) -> tuple[dict, dict]:
    """(the stored Hugging Face config.json or {}, CONVERSION_FILE or {}) of a run."""
    side = os.path.join(workdir, huggingface.HF_DIR)
    config = run_dir.read_json(os.path.join(side, huggingface.CONFIG)) or {}
    conversion = run_dir.read_json(os.path.join(side, CONVERSION_FILE)) or {}
    return config, conversion


def differing_field(cfg: ModelConfig, expected: ModelConfig, ignore: tuple[str, ...] = ()):
    """The first (dotted field, value, expected value) where `cfg` differs from `expected`,
    leaving out `ignore` and the fields that do not change the model's function or parameters;
    None when they agree."""
    ignore = (*ignore, *_NO_EFFECT)
    got, want = F.flatten(cfg.to_dict()), F.flatten(expected.to_dict())
    for name, value in got.items():
        if name not in ignore and want.get(name) != value:
            return name, value, want.get(name)
    return None


# Fields that choose how, not what, a model computes, or that only other switches read.
_NO_EFFECT = (
    "attention.impl",
    "dtype",
    "remat",
    "attention.temperature",
    "norm.dyt_alpha_init",
    "norm.dyt_learnable_alpha",
    "embeddings.share_source_target",
    "positional.train_positions",
)
