"""Loads a trained run back from its directory: config, dataset, model and parameters."""

import dataclasses
from pathlib import Path

import jax
import ml_collections

from transformer_jax import data, run_dir
from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.checkpoint import Checkpointer
from transformer_jax.train.optimizer import make_optimizer


@dataclasses.dataclass(frozen=True)
class LoadedRun:
    config: ml_collections.ConfigDict
    model_config: ModelConfig
    model: object  # the flax module
    state: steps.TrainState
    dataset: data.Dataset  # loaded once; analysis commands read their batches from it

    @property
    def info(self) -> data.DatasetInfo:
        return self.dataset.info

    @property
    def variables(self) -> dict:
        variables = {"params": self.state.params}
        if self.state.batch_stats:
            variables["batch_stats"] = self.state.batch_stats
        return variables


def load_run(workdir: str, step: int | None = None) -> LoadedRun:
    """The latest (or the given) checkpoint of a run written by `train_and_evaluate`."""
    workdir = Path(workdir).expanduser()
    resolved = run_dir.read_config(workdir)
    if resolved is None:
        raise ValueError(
            f"--workdir={workdir} holds no run (no {run_dir.CONFIG_FILE}); train one first"
        )
    resolved = run_dir.effective_config(resolved)
    config = ml_collections.ConfigDict(resolved)
    model_config = ModelConfig.from_dict(resolved["model"])
    model = build_model(model_config)
    dataset = data.load_dataset(config.data)
    optimizer = make_optimizer(TrainConfig.from_dict(resolved["train"]), model_config.d_model)
    sample = next(iter(dataset.eval_batches(dataset.info.eval_splits[0], batch_size=2)))
    abstract = jax.eval_shape(
        lambda: steps.init_state(model, optimizer, sample, jax.random.PRNGKey(0))
    )
    # Restore onto this process's first device, whatever devices the run was saved from.
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), abstract
    )
    with Checkpointer(workdir, every=1, keep=1_000_000, read_only=True) as checkpointer:
        restored = checkpointer.restore(abstract, step=step)
    if restored is None:
        raise ValueError(f"--workdir={workdir} has no checkpoint to load")
    state, _ = restored
    return LoadedRun(config, model_config, model, state, dataset)
