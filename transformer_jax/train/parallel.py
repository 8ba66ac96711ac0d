"""Scale-out: where the train state and the batches live, and how the train step is compiled.

Two ways to use many devices, chosen by `train.parallelism`:

- "jit" (default): JAX's SPMD runtime. One program is compiled for a device mesh
  (`jax.sharding.Mesh` over `jax.devices()`, axes ("data", "fsdp")); the batch is split along
  its first axis over every device, and XLA (GSPMD) inserts the collectives (Xu et al. 2021,
  "GSPMD"). With `train.fsdp = 1` parameters and optimizer state are replicated: plain data
  parallelism. With `train.fsdp = f > 1` each parameter (and each optimizer-state leaf of the
  same shape) is split f ways along its largest dimension that f divides, so each device holds
  about 1/f of them, gathered for the forward and backward pass and reduce-scattered after
  (ZeRO-3 / FSDP, Rajbhandari et al. 2020). Leaves with no such dimension (biases of odd size,
  scalars) stay replicated. The same code runs on 1 device and on N.
- "pmap": the classic replicated loop. The state is copied to every local device, the batch is
  reshaped to (devices, B / devices, ...), and `train_step` sums gradients and statistics with
  `lax.psum` over the "batch" axis (BatchNorm running statistics are averaged; in training
  BatchNorm normalises with each device's own batch statistics, as in the flax ImageNet
  example, so BatchNorm models are not bit-equal to one device under pmap). Recent JAX
  implements `jax.pmap` on top of `shard_map`, so this is the same runtime with a different
  programming model; it is kept for users who ask for it.

`data.batch_size` is the global batch (all devices, all hosts). It must divide evenly over the
devices and the `train.grad_accum_steps` micro-batches; `check_parallel_config` says which sizes
are valid before anything compiles.

Multi-host (TPU pods, multi-node GPU, or local processes): start one process per host, each
told its place by JAX_COORDINATOR_ADDRESS/JAX_NUM_PROCESSES/JAX_PROCESS_ID or, with
`train.distributed = True`, by the cluster (Cloud TPU, Slurm); see train/multihost.py. Every
host runs the same seeded data pipeline and keeps its own contiguous slice of each global
batch, rows [p * B/P, (p + 1) * B/P) for process p = `jax.process_index()` of P, which
`jax.make_array_from_process_local_data` assembles into one global array. Because the pipelines
stay in lockstep, the data iterator state is the same on every host and checkpoints resume
exactly, on any number of hosts.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from transformer_jax.config import TrainConfig
from transformer_jax.train import compile_cache, host_memory, multihost

DATA, FSDP = "data", "fsdp"  # Mesh axes: batch rows over both, parameters over FSDP.
PMAP_AXIS = "batch"


def check_parallel_config(train: TrainConfig, batch_size: int, num_devices: int | None = None):
    """Raises ValueError where `config.train`'s scale-out does not fit the devices or the batch,
    before anything compiles (the fields themselves are checked by TrainConfig)."""
    num_devices = jax.device_count() if num_devices is None else num_devices
    if num_devices % train.fsdp:
        raise ValueError(
            f"train.fsdp={train.fsdp} must divide the device count {num_devices}; valid: "
            f"{[d for d in range(1, num_devices + 1) if num_devices % d == 0]}"
        )
    unit = num_devices * train.grad_accum_steps
    if batch_size % unit:
        valid = [unit * m for m in range(1, 5)]
        raise ValueError(
            f"data.batch_size={batch_size} does not divide over {num_devices} device(s) x "
            f"train.grad_accum_steps={train.grad_accum_steps}; valid batch sizes are multiples "
            f"of {unit}, e.g. {valid}"
        )


def setup_runtime(train: TrainConfig) -> None:
    """Process-level setup that must precede any computation: malloc settings that let XLA:CPU
    reuse its temporaries (see host_memory.py), multi-host runtime and the persistent
    compilation cache (compiled programs are reused across restarts of a run)."""
    host_memory.reuse_freed_memory()
    multihost.initialize(train)
    compile_cache.configure(train.compilation_cache_dir)


def make_mesh(fsdp: int = 1, devices=None) -> Mesh:
    """A (devices / fsdp, fsdp) mesh with axes ("data", "fsdp")."""
    devices = np.asarray(jax.devices() if devices is None else devices)
    return Mesh(devices.reshape(devices.size // fsdp, fsdp), (DATA, FSDP))


def fsdp_spec(shape: tuple[int, ...], fsdp: int) -> PartitionSpec:
    """Shards the largest dimension that `fsdp` divides (the first such, on ties); else none."""
    if fsdp == 1:
        return PartitionSpec()
    dims = [d for d in np.argsort([-s for s in shape], kind="stable") if shape[d] % fsdp == 0]
    if not dims:
        return PartitionSpec()
    spec = [None] * len(shape)
    spec[dims[0]] = FSDP
    return PartitionSpec(*spec)


def state_shardings(mesh: Mesh, state) -> Any:
    """NamedShardings for a TrainState: parameters and optimizer state by `fsdp_spec`; the step,
    RNG and BatchNorm statistics replicated."""
    fsdp = mesh.shape[FSDP]
    replicated = NamedSharding(mesh, PartitionSpec())
    by_rule = lambda x: NamedSharding(mesh, fsdp_spec(np.shape(x), fsdp))
    shardings = jax.tree.map(lambda _: replicated, state)
    return shardings.replace(
        params=jax.tree.map(by_rule, state.params),
        opt_state=jax.tree.map(by_rule, state.opt_state),
    )


def process_slice(batch):
    """This host's rows of a global batch (all of it on a single host)."""
    count = jax.process_count()
    if count == 1:
        return batch
    index = jax.process_index()

    def rows(x):
        per = x.shape[0] // count
        return x[index * per : (index + 1) * per]

    return jax.tree.map(rows, batch)


@dataclasses.dataclass(frozen=True)
class Parallel:
    """Placement and compilation for one `train.parallelism`; see the module docstring.

    place_state: single-device state -> state on the devices (sharded or replicated).
    host_state: state on the devices -> one logical copy (for eval, checkpoints, logging).
    jit_train: the step as the jax.jit/jax.pmap object that compile_train runs, before any
      placement: what transformer_jax.aot lowers for a TPU slice with abstract arguments.
    compile_train: (state, batch) -> (state, metrics) step for this layout; takes host batches.
    wrap_eval: an eval function of (state, batch) for host batches and placed state.

    `devices` (pmap only) are the devices to replicate over: this host's by default, or the
    compile-only devices of a TPU topology (transformer_jax/aot).
    """

    kind: str
    mesh: Mesh | None
    devices: tuple | None = None

    @property
    def num_devices(self) -> int:
        """Devices one step runs on (all of them under pmap)."""
        if self.kind == "pmap":
            return len(self.devices) if self.devices is not None else jax.device_count()
        return self.mesh.devices.size

    def place_state(self, state):
        if self.kind == "pmap":  # One copy per local device, laid out as pmap outputs are.
            n = jax.local_device_count()
            stacked = jax.tree.map(
                lambda x: np.broadcast_to(np.asarray(x), (n, *np.shape(x))), state
            )
            return jax.pmap(lambda x: x)(stacked)
        return jax.device_put(state, state_shardings(self.mesh, state))

    def host_state(self, state):
        if self.kind == "pmap":
            return jax.tree.map(lambda x: x[0], state)
        return state

    def place_batch(self, batch):
        local = process_slice(batch)
        if self.kind == "pmap":
            n = jax.local_device_count()
            return jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), local)
        sharding = self.batch_sharding()
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local
        )

    def jit_train(self, train_step: Callable, state) -> Callable:
        """`train_step(state, batch, axis_name=...)` under jax.jit with this layout's shardings
        (or jax.pmap over the devices), donating state; `state` may be abstract."""
        if self.kind == "pmap":
            return jax.pmap(
                lambda s, b: train_step(s, b, axis_name=PMAP_AXIS),
                axis_name=PMAP_AXIS,
                donate_argnums=0,
                devices=self.devices,
            )
        shardings = state_shardings(self.mesh, state)
        return jax.jit(
            train_step,
            in_shardings=(shardings, self.batch_sharding()),
            out_shardings=(shardings, NamedSharding(self.mesh, PartitionSpec())),
            donate_argnums=0,
        )

    def batch_sharding(self) -> NamedSharding:
        """Batch rows split over every device of the mesh (jit)."""
        return NamedSharding(self.mesh, PartitionSpec((DATA, FSDP)))

    def compile_train(self, train_step: Callable, state) -> Callable:
        """`train_step(state, batch, axis_name=...)` compiled for this layout, donating state."""
        step = self.jit_train(train_step, state)
        if self.kind == "pmap":

            def pmapped(state, batch):
                state, metrics = step(state, self.place_batch(batch))
                return state, jax.tree.map(lambda x: x[0], metrics)  # identical on every device

            return pmapped
        if jax.process_count() == 1:
            # The jitted step places a host batch by its in_shardings itself, in C++: the same
            # arrays as place_batch's without its Python call per field, host time that every
            # step of a small model on a CPU pays.
            return step
        return lambda state, batch: step(state, self.place_batch(batch))

    def wrap_eval(self, eval_fn: Callable) -> "EvalFn":
        return EvalFn(self, eval_fn)


@dataclasses.dataclass(frozen=True)
class EvalFn:
    """A jitted `eval_fn(state, batch)` called with placed state and a host batch, as `parallel`
    evaluates: pmap evaluates one replica on one device, jit places the batch over the mesh.
    `compile(compile_args(state, batch))` compiles it for those arguments without running it,
    so that a call with them runs at once (train/compile_ahead.py)."""

    parallel: Parallel
    eval_fn: Callable

    def _args(self, state, batch) -> tuple:
        if self.parallel.kind == "pmap":
            return self.parallel.host_state(state), batch
        return state, self.parallel.place_batch(batch)

    def __call__(self, state, batch):
        return self.eval_fn(*self._args(state, batch))

    def compile_args(self, state, batch) -> tuple:
        """What `compile` takes: the state as shapes and shardings (the train step donates the
        state itself, so it may be gone by the time it compiles), the batch placed."""
        state, batch = self._args(state, batch)
        return jax.tree.map(_abstract, state), batch

    def compile(self, args: tuple) -> None:
        self.eval_fn.lower(*args).compile()


def _abstract(x):
    if isinstance(x, jax.Array):
        # weak_type too: a Python-scalar leaf (the step) is weakly typed, and jit's cache tells
        # it apart from a strong one.
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding, weak_type=x.weak_type)
    return x


def make_parallel(train: TrainConfig, devices=None) -> Parallel:
    """The layout of `config.train` (validated by `check_parallel_config`) over `devices`
    (default: every device of the run; transformer_jax.aot passes a TPU topology's)."""
    kind = train.parallelism
    if kind == "jit":
        return Parallel(kind, make_mesh(train.fsdp, devices))
    return Parallel(kind, None, None if devices is None else tuple(devices))
