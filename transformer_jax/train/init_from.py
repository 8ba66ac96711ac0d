"""train.init_from: a new run starts from another run's parameters (fine-tuning).

The source is any run directory with a checkpoint: one trained here, or a Hugging Face model
written by `python -m transformer_jax.convert`. Its latest checkpoint's parameters (and BatchNorm
statistics, where the model keeps any) replace the random initialisation; the step, the
optimizer state and the random key stay the new run's own, at step 0. The models must have the
same parameter shapes; the other model fields (dropout, epsilon, token ids, attention
implementation) may differ, as fine-tuning often changes them. A run that already holds a
checkpoint of its own resumes from it and never reads the source.
"""

from pathlib import Path

import jax

from transformer_jax import fields as F
from transformer_jax import run_dir
from transformer_jax.config import ModelConfig
from transformer_jax.families import family_of
from transformer_jax.models import build_model


def load(path: str, model_config: ModelConfig):
    """The source run's restored TrainState, after checking that `path` is a run directory
    with a checkpoint whose model has `model_config`'s parameter shapes; a one-line ValueError
    naming the field otherwise. Reads, never writes."""
    from transformer_jax.train.restore import load_run  # restore imports the trainer's modules

    source = Path(path).expanduser()
    field = f"train.init_from={path}"
    if not source.is_dir() or run_dir.read_config(source) is None:
        raise ValueError(
            f"{field} is not a run directory (no {run_dir.CONFIG_FILE}); valid: a directory "
            "written by transformer_jax.main or transformer_jax.convert, or '' (off)"
        )
    if not run_dir.has_checkpoints(source):
        raise ValueError(f"{field} holds no checkpoint; train it first or convert into it")
    resolved = run_dir.effective_config(run_dir.read_run_config(source))
    theirs = ModelConfig.from_dict(resolved["model"])
    if _param_shapes(theirs) != _param_shapes(model_config):
        ours_flat, theirs_flat = F.flatten(model_config.to_dict()), F.flatten(theirs.to_dict())
        differ = [
            f"model.{name}={value!r} there, {ours_flat.get(name)!r} here"
            for name, value in theirs_flat.items()
            if ours_flat.get(name) != value and name != "attention.impl"
        ]
        raise ValueError(
            f"{field}: its parameters differ in shape from this run's ({'; '.join(differ[:3])}); "
            "valid: a run of the same model shape"
        )
    return load_run(str(source)).state


def with_source(state, source):
    """`state` (a fresh TrainState on the devices) with `source`'s parameters and BatchNorm
    statistics, each laid out as `state`'s own leaf is. The optimizer state stays the fresh
    one: for the optimizers here (train/optimizer.py) it is zeros and step counts, whatever the
    parameters' values."""

    def placed(new, old):
        return jax.device_put(new, old.sharding) if hasattr(old, "sharding") else new

    return state.replace(
        params=jax.tree.map(placed, source.params, state.params),
        batch_stats=jax.tree.map(placed, source.batch_stats, state.batch_stats),
    )


def _param_shapes(cfg: ModelConfig) -> dict:
    """{parameter path: shape} of the model `cfg` builds, without computing anything."""
    model = build_model(cfg)
    args, kwargs = family_of(cfg).inputs(family_of(cfg).example_batch(cfg), cfg.tokens)
    abstract = jax.eval_shape(
        lambda: model.init(jax.random.PRNGKey(0), *args, train=False, **kwargs)
    )
    return {
        jax.tree_util.keystr(path): tuple(leaf.shape)
        for path, leaf in jax.tree_util.tree_leaves_with_path(abstract)
    }
