"""Loads a trained run back from its directory: config, model, parameters and tokenizer.

The data is read only when asked for (`LoadedRun.dataset`): sampling a run needs its stored
tokenizer, never its corpus, which may have been edited or moved since.
"""

import dataclasses
import functools
import sys
from pathlib import Path

import jax
import ml_collections
import numpy as np

from transformer_jax import data, run_dir
from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.data import tokenizers
from transformer_jax.data.info import Tokenizer
from transformer_jax.families import family_of
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.checkpoint import CHECKSUMS_FILE, Checkpointer
from transformer_jax.train.optimizer import make_optimizer


@dataclasses.dataclass(frozen=True)
class LoadedRun:
    workdir: Path
    config: ml_collections.ConfigDict
    model_config: ModelConfig
    model: object  # the flax module
    state: steps.TrainState
    # The tokenizer stored in the run directory; None for image data, and for runs written
    # before runs stored theirs (see `tokenizer`).
    stored_tokenizer: Tokenizer | None

    @functools.cached_property
    def dataset(self) -> data.Dataset:
        """The run's data, loaded once (analysis commands read their batches from it); a
        ValueError if its tokenizer is no longer the one the run trained with."""
        dataset = data.load_dataset(self.config.data)
        if self.stored_tokenizer is not None:
            tokenizers.check_stored_tokenizer(self.workdir, dataset.info.tokenizer)
        return dataset

    @property
    def info(self) -> data.DatasetInfo:
        return self.dataset.info

    @functools.cached_property
    def tokenizer(self) -> Tokenizer | None:
        """The tokenizer the run trained with: the stored one, else (an older run directory)
        rebuilt from the data, which is said on stderr."""
        if self.stored_tokenizer is not None:
            return self.stored_tokenizer
        rebuilt = self.info.tokenizer
        if rebuilt is not None:
            print(
                f"note: {self.workdir} stores no tokenizer (it predates them); rebuilt it from "
                f"{rebuilt.source}, which must be unchanged since the run trained",
                file=sys.stderr,
            )
        return rebuilt

    @property
    def variables(self) -> dict:
        return self.state.variables


def _check_weights(checkpoint: Path, params) -> None:
    """Refuses non-finite weights, and says on stderr when the checkpoint's bytes could not be
    verified: without its CHECKSUMS_FILE (a checkpoint older than checksums, or one that lost
    them) flipped bytes restore as other weights unnoticed."""
    unverified = not (checkpoint / CHECKSUMS_FILE).exists()
    leaves = jax.tree_util.tree_leaves_with_path(params)
    bad = [jax.tree_util.keystr(p) for p, x in leaves if not np.isfinite(np.asarray(x)).all()]
    if bad:
        why = f"; it has no {CHECKSUMS_FILE}, so it may be damaged" if unverified else ""
        raise ValueError(
            f"checkpoint {checkpoint} holds non-finite weights (params{bad[0]}"
            f"{f' and {len(bad) - 1} more' if len(bad) > 1 else ''}){why}; load an earlier "
            "checkpoint or train again"
        )
    if unverified:
        print(
            f"note: checkpoint {checkpoint} has no {CHECKSUMS_FILE}: its bytes are unverified",
            file=sys.stderr,
        )


def load_run(workdir: str, step: int | None = None) -> LoadedRun:
    """The latest (or the given) checkpoint of a run written by `train_and_evaluate`."""
    workdir = Path(workdir).expanduser()
    resolved = run_dir.read_run_config(workdir)
    if resolved is None:
        seeds = run_dir.group_seeds(workdir)
        if seeds:
            raise ValueError(
                f"--workdir={workdir} holds a seed group: name one of its runs, e.g. "
                f"--workdir={workdir / seeds[0]}"
            )
        raise ValueError(
            f"--workdir={workdir} holds no run (no {run_dir.CONFIG_FILE}); train one first"
        )
    resolved = run_dir.effective_config(resolved)
    config = ml_collections.ConfigDict(resolved)
    model_config = ModelConfig.from_dict(resolved["model"])
    model = build_model(model_config)
    optimizer = make_optimizer(TrainConfig.from_dict(resolved["train"]), model_config.d_model)
    sample = family_of(model_config).example_batch(model_config)
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
    _check_weights(workdir / run_dir.CHECKPOINT_DIR / str(int(state.step)), state.params)
    stored_tokenizer = tokenizers.read_tokenizer(workdir)
    return LoadedRun(workdir, config, model_config, model, state, stored_tokenizer)
