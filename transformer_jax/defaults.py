"""The base experiment config every file in configs/ starts from, and `quick` shrinking.

A config has four parts: `seed`, `model` (the fields of `ModelConfig`), `data` (the dataset's
documented fields, see `transformer_jax.data.registry`) and `train` (documented below).
"""

import dataclasses

import ml_collections

from transformer_jax import data
from transformer_jax.config import ModelConfig


def model_config(**overrides) -> ml_collections.ConfigDict:
    """`ModelConfig`'s defaults as a ConfigDict; vocab_size, max_len, image_size and num_channels
    come from the data (-1)."""
    fields = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    fields.update(vocab_size=-1, max_len=-1, image_size=-1, num_channels=-1)
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"unknown model config field(s) {unknown}; valid: {sorted(fields)}")
    fields.update(overrides)
    return ml_collections.ConfigDict(fields)


def train_config(**overrides) -> ml_collections.ConfigDict:
    t = ml_collections.ConfigDict()
    t.steps = 2000  # optimizer updates in the whole run
    t.optimizer = "adam"  # adam | adamw | sgd
    t.learning_rate = 1e-3  # peak rate (cosine/constant) or multiplier of the paper's (rsqrt)
    t.schedule = "cosine"  # rsqrt (the paper's warmup + 1/sqrt) | cosine | constant
    t.warmup_steps = 200  # linear warmup, in steps
    t.b1 = 0.9  # Adam beta1
    t.b2 = 0.98  # Adam beta2 (the paper: 0.98)
    t.eps = 1e-9  # Adam epsilon (the paper: 1e-9)
    t.weight_decay = 0.0  # decoupled weight decay, adamw only
    t.grad_clip_norm = 1.0  # clip the global gradient norm; 0 = no clipping
    t.label_smoothing = 0.0  # the paper: 0.1
    t.log_every = 50  # steps between train-metric log lines
    t.eval_every = 500  # steps between evaluations (and at the end)
    t.eval_examples = 0  # examples per eval split; 0 = the whole split
    t.checkpoint_every = 500  # steps between checkpoints (a multiple of log_every)
    t.keep_checkpoints = 2  # newest checkpoints kept on disk
    t.diagnostics = True  # attention entropy / max weight / logit std per layer at eval
    # seq2seq only (ignored otherwise): also greedy-decode every eval batch, the decoder reading
    # its own outputs, and log gen_seq_accuracy, the fraction of outputs equal to the target.
    t.generate_eval = True
    # Scale-out (see transformer_jax.train.parallel). data.batch_size is the global batch: it
    # must divide evenly over the devices (and the micro-batches).
    t.parallelism = "jit"  # jit: one program over a device mesh (GSPMD) | pmap: replicated
    t.fsdp = 1  # jit only: mesh axis size that shards parameters and optimizer state (ZeRO-3)
    t.grad_accum_steps = 1  # micro-batches per update; the update equals one full-batch step
    t.distributed = False  # multi-host: call jax.distributed.initialize() first (TPU pods)
    t.compilation_cache_dir = ""  # persistent XLA compilation cache directory; "" = off
    # Dropout's random bits: "partitionable" (the same masks however the batch is sharded),
    # "sequential" (4-5x faster on CPUs) or "auto" (sequential on one device); see train/step.py.
    t.threefry = "auto"
    t.update(overrides)
    return t


def base_config(dataset: str) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.seed = 0  # parameters, dropout and data order all derive from it
    config.model = model_config()
    config.data = data.default_data_config(dataset)
    config.train = train_config()
    return config


def shrink(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`quick`: a smaller, shorter version of any config, for a laptop smoke run in ~a minute."""
    m, t = config.model, config.train
    m.d_model = min(m.d_model, 64)
    m.num_heads = min(m.num_heads, 4)
    if m.num_kv_heads:
        m.num_kv_heads = min(m.num_kv_heads, m.num_heads)
    m.d_ff = min(m.d_ff, 128)
    m.num_encoder_layers = min(m.num_encoder_layers, 2)
    m.num_decoder_layers = min(m.num_decoder_layers, 2)
    t.steps = min(t.steps, 200)
    t.warmup_steps = min(t.warmup_steps, 20)
    t.log_every = min(t.log_every, 20)
    t.eval_every = t.steps
    t.checkpoint_every = t.steps
    t.eval_examples = 256
    d = config.data
    for name, cap in (("num_train", 5000), ("num_test", 256), ("num_test_long", 256)):
        if name in d:
            d[name] = min(d[name], cap)
    return config


def apply_arg(config: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
    """Handles the `:arg` of `--config=configs/x.py:arg`; "quick" shrinks the run."""
    if arg in (None, ""):
        return config
    if arg == "quick":
        return shrink(config)
    raise ValueError(f"config argument {arg!r} is not valid; valid: '' or 'quick'")


def from_file(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
    """Loads `get_config(arg)` from a config file, as `--config=path:arg` does."""
    import runpy

    return runpy.run_path(str(path))["get_config"](arg)
