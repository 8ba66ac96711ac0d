"""Seed groups and run groups: runs of one config trained together, as one program.

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
train lines, evaluation, BLEU, checkpoints and summaries. The teacher-forced evaluation reads the
stacked states with one vmapped eval step per batch for every seed (train/group_eval.py);
decoding (generation accuracy, BLEU) takes each seed's state out of the stack.

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
each as it would alone. A member that ended before (its summary.json "finished" or "diverged")
is held in its lane, untouched (train/loop.py), so a group resumed with all its members is the
same program, bit for bit, as the uninterrupted one (the sweep relaunches it so).

Run groups (`train_run_group(configs, workdirs)`) generalise this to members that differ in seed
and in the optimizer's and schedule's scalars, `group_fields.GROUP_SCALARS`: train.learning_rate,
warmup_steps, b1, b2, eps, weight_decay and grad_clip_norm (all members clip, or none does): a
tuned sweep's learning-rate x warmup x seed grid of one cell trains as one program. The fields
the members differ in become per-member arrays, vmapped with the states into the step, where
the optimizer is built from each member's traced values (train/optimizer.py); the fields all
members share stay constants, so a seed group's program is unchanged. Any other difference
(dropout rate, model, data, steps, schedule kind, optimizer kind, momentum) is refused: a
different shape or program. Each member is an ordinary run directory, as a seed group's seeds
are, with its own config.json; equality with the solo runs is as above (the tolerance of
tests/train/test_seed_group.py).

Memory: the members' states and activations grow with their number. A run group splits into
consecutive parts trained one after the other, each its own program: of at most
`max_group_size` members when given; by default, on a device that reports its memory (GPU,
TPU), halved until the compiled step of a part fits (train/group_memory.py, one extra compile of
the step per halving tried); on a CPU, which reports none, the group trains whole.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax import ShapeDtypeStruct
from jax.sharding import NamedSharding, PartitionSpec

from transformer_jax import fields as F
from transformer_jax import run_dir
from transformer_jax.config import TrainConfig
from transformer_jax.data.abstract import abstract_batch, split_lengths, zeros_like
from transformer_jax.train import group_memory
from transformer_jax.train import step as steps
from transformer_jax.train.group_fields import GROUP_KEYS, GROUP_SCALARS
from transformer_jax.train.loop import train_runs
from transformer_jax.train.optimizer import make_optimizer
from transformer_jax.train.parallel import DATA, FSDP, Parallel, make_parallel
from transformer_jax.train.timing import Phases
from transformer_jax.train.trainer import Prepared, prepare, sample_batch


def check_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds of a group as a list; a ValueError naming them unless distinct ints in
    [0, 2**32) (fields.check_seed)."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("--seeds is empty; expected one or more seeds, e.g. 0,1,2")
    for seed in seeds:
        if not F.is_seed(seed):
            shown = ",".join(map(str, seeds))
            raise ValueError(f"--seeds={shown} holds {seed!r}; valid seeds: {F.VALID_SEEDS}")
    if len(set(seeds)) != len(seeds):
        shown = ",".join(map(str, seeds))
        repeated = ", ".join(str(s) for s in sorted(set(seeds)) if seeds.count(s) > 1)
        raise ValueError(f"--seeds={shown} repeats a seed ({repeated}); valid: each seed once")
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


def _flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_members(configs: Sequence[ml_collections.ConfigDict]) -> tuple[str, ...]:
    """The `GROUP_SCALARS` the members of a run group differ in (train.* names), in that order;
    a ValueError naming the first other field that differs, which one program cannot train."""
    flat = [_flat(config.to_dict()) for config in configs]
    allowed = {"seed", *GROUP_KEYS}
    for key in sorted(set().union(*flat)):
        values = [f.get(key) for f in flat]
        if key not in allowed and any(v != values[0] for v in values):
            raise ValueError(
                f"the runs of a group differ in {key} ({sorted(set(map(repr, values)))}); "
                f"they may differ only in seed and train.{{{', '.join(GROUP_SCALARS)}}}: "
                "train them in groups of their own"
            )
    clips = {f["train.grad_clip_norm"] > 0 for f in flat}
    if len(clips) > 1:
        raise ValueError(
            "the runs of a group differ in whether train.grad_clip_norm > 0 "
            f"({sorted({f['train.grad_clip_norm'] for f in flat})}); all clip or none does"
        )
    return tuple(name for name in GROUP_SCALARS if len({f[f"train.{name}"] for f in flat}) > 1)


def member_scalars(train_cfgs: Sequence[TrainConfig], names: Sequence[str]) -> dict:
    """name -> each member's value of it, one array with a leading member axis (the step's
    per-member scalars: warmup steps as int32, the others float32)."""
    return {
        name: np.asarray(
            [getattr(t, name) for t in train_cfgs],
            np.int32 if name == "warmup_steps" else np.float32,
        )
        for name in names
    }


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
    """`jax.vmap(train_step)` over a leading seed axis of the state, the batch and the members'
    scalars (`train_step(state, batch, scalars)`), jitted for `mesh` with the state donated.
    With `shards_seeds`, the state, batches, scalars and metrics are split along the seed axis:
    each device runs whole seeds, with no collective between them.
    Otherwise the stacked state is replicated and each seed's batch rows are split over the
    devices as in a solo run (XLA sums each seed's gradients over them)."""
    seed_sharding = group_state_sharding(num_seeds, mesh)  # the metrics' too
    batch_sharding = seed_sharding
    if not shards_seeds(num_seeds, mesh):
        batch_sharding = NamedSharding(mesh, PartitionSpec(None, (DATA, FSDP)))
    return jax.jit(
        jax.vmap(train_step),
        in_shardings=(seed_sharding, batch_sharding, seed_sharding),
        out_shardings=(seed_sharding, seed_sharding),
        donate_argnums=0,
    )


def group_train_step(prepared: Prepared, step_devices: int):
    """(state, batch, scalars) -> the train step of a member whose `scalars` (name -> traced
    value; `member_scalars`) replace those of `prepared`'s train config."""
    model, train_cfg = prepared.model, prepared.train_cfg
    d_model = prepared.model_config.d_model

    def train_step(state, batch, scalars):
        optimizer = make_optimizer(train_cfg, d_model, scalars)
        return steps.make_train_step(model, optimizer, train_cfg, step_devices)(state, batch)

    return train_step


def _group_init(prepared: Prepared, batch=None):
    """(rng, a member's scalars) -> its initial TrainState: one program for every member;
    shaped by `batch`, or by an evaluation batch read from the data."""
    d_model = prepared.model_config.d_model
    return steps.make_init(
        prepared.model,
        lambda values: make_optimizer(prepared.train_cfg, d_model, values),
        sample_batch(prepared) if batch is None else batch,
    )


def group_step_bytes(prepared: Prepared, scalars: dict, size: int) -> int:
    """Peak bytes of the compiled step of `size` members of the group whose `member_scalars`
    are `scalars` (train/group_memory.py), compiled from shapes alone."""
    lowered = lower_group_train(prepared, scalars, size, make_parallel(prepared.train_cfg))
    return group_memory.compiled_bytes(lowered.compile())


def lower_group_train(prepared: Prepared, scalars: dict, size: int, parallel: Parallel):
    """The group's vmapped train step for `size` members, lowered from shapes alone on
    `parallel`'s mesh (this machine's devices, or a TPU slice's for transformer_jax.aot)."""
    one = {name: values[0] for name, values in scalars.items()}
    lengths = split_lengths(prepared.info, "train")
    data = prepared.resolved["data"]
    # One row of zeros shapes the parameters: a prepared run compiled for a TPU slice has
    # no data to read.
    init = _group_init(prepared, zeros_like(abstract_batch(prepared.info, data, 1, lengths)))
    state = jax.eval_shape(init, jax.random.PRNGKey(0), one)
    batch = abstract_batch(prepared.info, data, prepared.batch_size, lengths)

    def stacked(tree):
        return jax.tree.map(lambda x: ShapeDtypeStruct((size, *x.shape), x.dtype), tree)

    step_devices = 1 if shards_seeds(size, parallel.mesh) else parallel.num_devices
    train = compile_group_train(group_train_step(prepared, step_devices), parallel.mesh, size)
    return train.lower(stacked(state), stacked(batch), stacked(one))


class GroupProgram:
    """The members' train states stacked on a leading axis and stepped by one vmapped train
    step (`compile_group_train`); the loop's Program (train/loop.py) for a seed or run group,
    member i in lane i. `scalars`: `member_scalars` of the fields the members differ in."""

    def __init__(
        self,
        prepared: Prepared,
        parallel: Parallel,
        seeds: Sequence[int],
        phases,
        scalars: dict | None = None,
    ):
        scalars = scalars or {}
        self._parallel = parallel
        with phases("init"):
            init = _group_init(prepared)
            self._initial = [
                parallel.place_state(
                    init(jax.random.PRNGKey(s), {k: v[i] for k, v in scalars.items()})
                )
                for i, s in enumerate(seeds)
            ]
        self.num_params = steps.count_params(self._initial[0].params)
        # A seed trained on devices of its own sees its whole batch on one device, as a solo run
        # on one device does: the same dropout bits (train.threefry="auto" picks by device count).
        step_devices = 1 if shards_seeds(len(seeds), parallel.mesh) else parallel.num_devices
        self._train_fn = compile_group_train(
            group_train_step(prepared, step_devices), parallel.mesh, len(seeds)
        )
        self._sharding = group_state_sharding(len(seeds), parallel.mesh)
        self._scalars = jax.device_put(scalars, self._sharding)
        self._states = None
        self.version = 0  # steps dispatched: the stacked states change with each (group_eval)

    def initial_states(self) -> list:
        initial, self._initial = self._initial, None
        return initial

    def start(self, states: Sequence) -> None:
        self._states = jax.device_put(stack(states), self._sharding)

    def step(self, batches: Sequence):
        batch = {name: np.stack([b[name] for b in batches]) for name in batches[0]}
        self._states, metrics = self._train_fn(self._states, batch, self._scalars)
        self.version += 1
        return metrics

    @property
    def stacked_states(self):
        """Every member's train state, stacked (train/group_eval.py evaluates them at once)."""
        return self._states

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
    configs = []
    for seed in seeds:
        member = config.copy_and_resolve_references()
        member.seed = seed
        configs.append(member)
    workdirs = [Path(run_dir.seed_dir(Path(workdir).expanduser(), seed)) for seed in seeds]
    return _train_members(configs, workdirs, max_group_size=None)


def train_run_group(
    configs: Sequence[ml_collections.ConfigDict],
    workdirs: Sequence[str],
    *,
    max_group_size: int | None = None,
) -> list[run_dir.RunSummary]:
    """Trains each of `configs` in its workdir, as one vmapped program (or, split by memory or
    `max_group_size`, a few: see the module docstring). The configs may differ only in seed and
    in `group_fields.GROUP_SCALARS` (`check_members`); each workdir is an ordinary run directory.

    Returns the members' summaries in order, as `train_seed_group` does; when a signal stops one
    part of a split group, the parts after it are not started and have no summary."""
    configs, workdirs = list(configs), [Path(w).expanduser() for w in workdirs]
    if not configs or len(configs) != len(workdirs) or len(set(workdirs)) != len(workdirs):
        raise ValueError(
            f"a run group needs one distinct run directory per config; got {len(configs)} "
            f"configs and the directories {[str(w) for w in workdirs]}"
        )
    if max_group_size is not None and (isinstance(max_group_size, bool) or max_group_size < 1):
        raise ValueError(f"max_group_size={max_group_size!r} is invalid; expected an int >= 1")
    for config, workdir in zip(configs, workdirs, strict=True):
        F.check_seed(f"{run_dir.shown(workdir)}: seed", config.seed)
    for workdir in workdirs:
        run_dir.check_layout(workdir, group=False)
    return _train_members(configs, workdirs, max_group_size=max_group_size)


def _train_members(configs, workdirs, *, max_group_size):
    """`train_run_group` after its directories are checked."""
    names = check_members(configs)
    phases = Phases()  # The group's wall time; see train/timing.py.
    prepared = prepare(configs[0], phases)
    check_group_parallelism(prepared.train_cfg)
    if prepared.info.train_lengths_vary:
        raise ValueError(
            f"data.name={prepared.info.name!r} pads each training batch to its own length here "
            "(data.bucket_by_length), so the members' batches of one step differ in shape and "
            "cannot be stacked: train them separately (a sweep: --seed_groups=false)"
        )
    train_cfgs = [TrainConfig.from_dict(config.train.to_dict()) for config in configs]
    resolved = [
        {**prepared.resolved, "seed": config.seed, "train": train_cfg.to_dict()}
        for config, train_cfg in zip(configs, train_cfgs, strict=True)
    ]
    seeds = [config.seed for config in configs]
    size = max_group_size
    if size is None:
        scalars = member_scalars(train_cfgs, names)
        size = group_memory.fitting_size(
            len(configs),
            lambda n: group_step_bytes(prepared, scalars, n),
            group_memory.device_memory_limit(),
        )
    summaries = []
    for start in range(0, len(configs), size):
        part = slice(start, start + size)
        scalars = member_scalars(train_cfgs[part], names)

        def make_program(parallel, seeds, phases, scalars=scalars):
            return GroupProgram(prepared, parallel, seeds, phases, scalars)

        done = train_runs(
            prepared, seeds[part], workdirs[part], make_program, phases, resolved=resolved[part]
        )
        summaries += done
        if any(summary.status == "stopped" for summary in done):
            break
    return summaries
