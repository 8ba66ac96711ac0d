"""Seed groups: the seeds of one config trained together, as one program.

`train_seed_group(config, workdir, seeds)` trains `config` once per seed, seed s in
WORKDIR/seed_<s>/ with the files a solo run (`train_and_evaluate` with config.seed = s) writes
there, so `transformer_jax.generate`, the analysis commands, the report and a resume read each
seed as an ordinary run. The seeds' train states (parameters, optimizer state, BatchNorm
statistics, step and dropout key) are stacked on a leading seed axis and updated by one
`jax.jit(jax.vmap(train_step))`: an accelerator runs one program n times the size, and the step
compiles once for all seeds (PureJaxRL trains RL seeds the same way). What differs between the
seeds is what differs between their solo runs: the initial parameters and dropout key
(`PRNGKey(seed)`) and the data order (`train_iterator(seed=seed)`).

Everything on the host is per seed and goes through the solo run's own pieces: logging windows,
train lines, evaluation (each seed's state through the solo run's compiled eval step, so its
eval metrics are the solo run's whenever its parameters are), BLEU, checkpoints and summaries.

Equality with the solo runs: to rounding, not bit for bit. Under vmap each matmul of the step is
a batched one, which XLA:CPU sums in another order, so a seed's loss can differ from its solo
run's in the last bit from the first step; with SGD the metrics stay within ~2e-7 relative and
the parameters within ~2e-7 absolute over 20 steps of the tests' models, while Adam, whose first
updates are about lr * sign(gradient), turns a near-zero gradient entry whose sign flips into a
2 * lr parameter difference (tests/train/test_seed_group.py states the measurements). On several
devices, a group with as many seeds as devices (or a multiple) trains each seed on devices of
its own, the seed axis sharded over them with no communication between seeds: different runs
on different devices at once, in one program (a TPU host's chips, a multi-GPU machine); any
other group replicates its state and splits each seed's batch rows over the devices as in a
solo run (`compile_group_train`).

The loop is the solo run's (train/loop.py), driving this file's `GroupProgram`. A seed whose
loss turns non-finite gets the "diverged" summary its solo run would write, and a seed that stops
early (train.early_stop_metric) its "finished" one at its own step; either is no longer logged,
evaluated or checkpointed, and the other seeds train on (its lane of the vmapped step keeps
computing, independently of theirs). A signal checkpoints every seed and returns.

Resume: each seed restores its own latest checkpoint and continues from its own step: each lane
of the vmapped step reads its own step count (dropout keys, learning rate), so seeds at different
steps (a group killed between its seeds' saves, or a seed trained on alone) train on together,
each as it would alone.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from transformer_jax import run_dir
from transformer_jax.train import step as steps
from transformer_jax.train.loop import train_runs
from transformer_jax.train.parallel import DATA, FSDP, Parallel
from transformer_jax.train.timing import Phases
from transformer_jax.train.trainer import Prepared, prepare, sample_batch


def check_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds of a group as a list; a ValueError naming them unless distinct ints >= 0."""
    seeds = list(seeds)
    if not seeds or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds):
        raise ValueError(f"--seeds={seeds!r} is invalid; expected one or more ints >= 0")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds={seeds!r} repeats a seed; each seed trains once")
    return seeds


def check_group_parallelism(train_cfg) -> None:
    """A seed group shards each batch over the devices and replicates the stacked state; the
    layouts that place a state otherwise are refused before anything compiles."""
    for field, value, valid in (
        ("parallelism", train_cfg.parallelism, "jit"),
        ("fsdp", train_cfg.fsdp, 1),
        ("distributed", train_cfg.distributed, False),
    ):
        if value != valid:
            raise ValueError(
                f"train.{field}={value!r} cannot train a seed group (valid: {valid!r}); "
                "train the seeds separately"
            )


def stack(trees: Sequence[Any]) -> Any:
    """Pytrees of equal structure -> one pytree with a leading axis over them."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def unstack(tree: Any, index: int) -> Any:
    """Entry `index` of a pytree stacked by `stack`."""
    return jax.tree.map(lambda x: x[index], tree)


def shards_seeds(num_seeds: int, mesh) -> bool:
    """Whether a group of `num_seeds` trains each seed on devices of its own: several devices,
    and seeds that divide evenly over them."""
    return mesh.size > 1 and num_seeds % mesh.size == 0


def group_state_sharding(num_seeds: int, mesh) -> NamedSharding:
    """Where a group's stacked state lives: split along the seed axis (`shards_seeds`), or
    replicated on every device."""
    if shards_seeds(num_seeds, mesh):
        return NamedSharding(mesh, PartitionSpec((DATA, FSDP)))
    return NamedSharding(mesh, PartitionSpec())


def compile_group_train(train_step, mesh, num_seeds: int):
    """`jax.vmap(train_step)` over a leading seed axis of the state and the batch, jitted for
    `mesh` with the state donated. With `shards_seeds`, the state, batches and metrics are split
    along the seed axis: each device runs whole seeds, with no collective between them.
    Otherwise the stacked state is replicated and each seed's batch rows are split over the
    devices as in a solo run (XLA sums each seed's gradients over them)."""
    seed_sharding = group_state_sharding(num_seeds, mesh)  # the metrics' too
    batch_sharding = seed_sharding
    if not shards_seeds(num_seeds, mesh):
        batch_sharding = NamedSharding(mesh, PartitionSpec(None, (DATA, FSDP)))
    return jax.jit(
        jax.vmap(train_step),
        in_shardings=(seed_sharding, batch_sharding),
        out_shardings=(seed_sharding, seed_sharding),
        donate_argnums=0,
    )


class GroupProgram:
    """The seeds' train states stacked on a leading seed axis and stepped by one vmapped train
    step (`compile_group_train`); the loop's Program (train/loop.py) for a seed group, seed i in
    lane i."""

    def __init__(self, prepared: Prepared, parallel: Parallel, seeds: Sequence[int], phases):
        model, optimizer, train_cfg = prepared.model, prepared.optimizer, prepared.train_cfg
        self._parallel = parallel
        with phases("init"):
            init = steps.make_init(model, optimizer, sample_batch(prepared))
            self._initial = [parallel.place_state(init(jax.random.PRNGKey(s))) for s in seeds]
        self.num_params = steps.count_params(self._initial[0].params)
        # A seed trained on devices of its own sees its whole batch on one device, as a solo run
        # on one device does: the same dropout bits (train.threefry="auto" picks by device count).
        step_devices = 1 if shards_seeds(len(seeds), parallel.mesh) else parallel.num_devices
        self._train_fn = compile_group_train(
            steps.make_train_step(model, optimizer, train_cfg, step_devices),
            parallel.mesh,
            len(seeds),
        )
        self._sharding = group_state_sharding(len(seeds), parallel.mesh)
        self._states = None

    def initial_states(self) -> list:
        initial, self._initial = self._initial, None
        return initial

    def start(self, states: Sequence) -> None:
        self._states = jax.device_put(stack(states), self._sharding)

    def step(self, batches: Sequence):
        batch = {name: np.stack([b[name] for b in batches]) for name in batches[0]}
        self._states, metrics = self._train_fn(self._states, batch)
        return metrics

    def lane(self, metrics, i: int) -> dict:
        return {name: value[i] for name, value in metrics.items()}

    def state(self, i: int):
        # A sharded group holds the seed on devices of its own; the eval step and checkpoints
        # expect the solo run's layout.
        return self._parallel.place_state(unstack(self._states, i))

    def host_state(self, i: int):
        return self.state(i)

    def opt_state(self, i: int):
        return unstack(self._states.opt_state, i)


def train_seed_group(
    config: ml_collections.ConfigDict, workdir: str, seeds: Sequence[int]
) -> list[run_dir.RunSummary]:
    """Trains `config` for each of `seeds` in WORKDIR/seed_<seed>/, as one vmapped program.

    Returns each seed's summary, in the order of `seeds`: the one written to its summary.json,
    or a "stopped" one (not written) when a signal stopped the group. Raises
    CheckpointSaveError (after writing the "failed" summary of the seed that could not save).
    """
    seeds = check_seeds(seeds)
    run_dir.check_layout(Path(workdir).expanduser(), group=True)
    phases = Phases()  # The group's wall time; see train/timing.py.
    prepared = prepare(config, phases)
    check_group_parallelism(prepared.train_cfg)
    workdirs = [Path(run_dir.seed_dir(Path(workdir).expanduser(), seed)) for seed in seeds]

    def make_program(parallel, seeds, phases):
        return GroupProgram(prepared, parallel, seeds, phases)

    return train_runs(prepared, seeds, workdirs, make_program, phases)
