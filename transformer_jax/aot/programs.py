"""The programs a run executes, compiled ahead of time for a TPU slice from abstract shapes.

`plan_run` prepares a config with the trainer's own `prepare` (train/trainer.py) for the slice's
compile-only devices: the same checks, the dataset described by its registry entry's facts
(data/registry.py `describe_dataset`), "auto" choices made for the TPU. `compile_programs` then
lowers and compiles the functions the run jits, with the trainer's own builders: the train step
with the run's shardings (train/parallel.py `jit_train`: jit data parallel or fsdp, or pmap),
the eval step, and the programs each of the run's evaluators declares (train/evaluators.py
`EvaluatorEntry.programs`: greedy decoding for generation accuracy, greedy and beam for BLEU).
Nothing is read, allocated or run; the compiler's memory and cost analyses are the result.
"""

import dataclasses
import functools
import re

import jax
import ml_collections
import numpy as np
from jax import ShapeDtypeStruct
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from transformer_jax.aot.topology import Topology
from transformer_jax.aot.traffic import Traffic, train_step_traffic, tree_bytes
from transformer_jax.data.abstract import abstract_batch, split_lengths, zeros_like
from transformer_jax.models import build_model
from transformer_jax.train import evaluators, seed_group
from transformer_jax.train import step as steps
from transformer_jax.train.parallel import (
    Parallel,
    check_parallel_config,
    make_parallel,
    state_shardings,
)
from transformer_jax.train.trainer import Prepared, prepare


@dataclasses.dataclass(frozen=True)
class Target:
    """A run as the trainer prepares it (train/trainer.py `Prepared`) and the TPU slice it is
    compiled for, laid out over the slice's devices as `train.parallelism` says."""

    prepared: Prepared
    topology: Topology

    @functools.cached_property
    def parallel(self) -> Parallel:
        return make_parallel(self.prepared.train_cfg, self.topology.devices)

    @property
    def batch_size(self) -> int:
        return self.prepared.batch_size


def plan_run(config: ml_collections.ConfigDict, topology: Topology) -> Target:
    """`config` prepared by the trainer for `topology`'s chips; its ValueErrors name the
    field, as a run's do."""
    return Target(prepare(config, compile_for=topology.devices), topology)


def with_batch_size(target: Target, batch_size: int) -> Target:
    """The same run at another global batch size (checked over the chips)."""
    prepared = target.prepared
    check_parallel_config(prepared.train_cfg, batch_size, target.topology.num_chips)
    return Target(dataclasses.replace(prepared, batch_size=batch_size), target.topology)


def attention_path(target: Target, train: "Program | None" = None) -> str:
    """The attention implementation the programs use (model.attention.impl, resolved for the
    slice's platform): "jax" (jax.nn.dot_product_attention), "splash", "cudnn" or "einsum".
    With the compiled `train` step, splash whose kernel the step does not contain (lengths
    that no block divides: layers/attention.py `kernel_for`) is named as the jax path it took."""
    impl = target.prepared.model_config.attention.impl
    if impl == "splash" and train is not None and train.compiled and not train.pallas_kernels:
        return "jax (lengths splash cannot tile)"
    return impl


@dataclasses.dataclass(frozen=True)
class Program:
    """One compiled program (or the compiler's refusal) and what it processes per call."""

    name: str  # train | eval | an evaluator's program (generation, bleu_greedy, bleu_beam)
    error: str = ""  # the compiler's (or a builder's) error in one line; "" when compiled
    memory: dict[str, int] = dataclasses.field(default_factory=dict)  # bytes per chip
    flops: float = 0.0  # XLA's count, per chip
    bytes_accessed: float = 0.0  # XLA's count, per chip
    tokens: int = 0  # tokens (images for classifiers) one call processes, all chips
    loops: bool = False  # a decoding loop, which XLA's counts hold once: no time estimate
    traffic: Traffic | None = None  # the train step's analytic HBM traffic (aot/traffic.py)
    # Pallas kernel calls in the lowered program (splash attention), whose FLOPs XLA's count
    # leaves out.
    pallas_kernels: int = 0

    @property
    def compiled(self) -> bool:
        return not self.error

    @property
    def total_bytes(self) -> int:
        """Peak HBM per chip: arguments and outputs (less what donation aliases), temporaries
        and the program's code."""
        m = self.memory
        return m["arguments"] + m["outputs"] - m["aliased"] + m["temporaries"] + m["code"]


def batch_of(target: Target, split: str) -> dict:
    """The abstract batch of `split` ("train", or "eval": the longest evaluation split)."""
    prepared = target.prepared
    lengths = split_lengths(prepared.info, split)
    return abstract_batch(prepared.info, prepared.resolved["data"], prepared.batch_size, lengths)


def abstract_state(target: Target):
    """The TrainState as ShapeDtypeStructs, from the trainer's own initialiser."""
    prepared = target.prepared
    one_row = dataclasses.replace(prepared, batch_size=1)
    batch = zeros_like(batch_of(Target(one_row, target.topology), "train"))
    init = steps.make_init(prepared.model, prepared.optimizer, batch)
    return jax.eval_shape(init, jax.ShapeDtypeStruct((2,), np.uint32))


def _placed(tree, shardings):
    return jax.tree.map(
        lambda x, s: ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )


def _stacked(tree, n: int):
    """pmap's arguments: a leading axis of one entry per device."""
    return jax.tree.map(lambda x: ShapeDtypeStruct((n, *x.shape), x.dtype), tree)


def _per_device_rows(batch, n: int):
    return jax.tree.map(
        lambda x: ShapeDtypeStruct((n, x.shape[0] // n, *x.shape[1:]), x.dtype), batch
    )


def tokens_per_call(target: Target, split: str) -> int:
    """Target tokens (lm, seq2seq) or images (classifiers) of one batch: what a run's tokens/s
    counts, padding included."""
    info = target.prepared.info
    if info.kind == "classification":
        return target.batch_size
    return target.batch_size * split_lengths(info, split)[1]


def _analyse(name: str, compiled, tokens: int) -> Program:
    stats = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, list) else cost) or {}
    memory = {
        "arguments": stats.argument_size_in_bytes,
        "outputs": stats.output_size_in_bytes,
        "aliased": stats.alias_size_in_bytes,
        "temporaries": stats.temp_size_in_bytes,
        "code": stats.generated_code_size_in_bytes,
    }
    return Program(
        name,
        memory=memory,
        flops=float(cost.get("flops", 0.0)),
        bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        tokens=tokens,
    )


# XLA:TPU's two ways of refusing a program that does not fit: "Used 45.2G of 15.75G hbm" and
# "the total memory required for HLO temporaries (887.25G) exceeds available HBM (15.75G)".
_TPU_OOM = re.compile(r"(?:Used |memory required for [^(]*\()([\d.]+)([KMGT])")
_SCALE = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def needed_bytes(program: Program) -> float | None:
    """Bytes per chip the train step needs: from the compiler's analysis, or from its
    out-of-memory message (at least that: the temporaries alone, in one of its forms)."""
    if program.compiled:
        return program.total_bytes
    match = _TPU_OOM.search(program.error)
    return float(match[1]) * _SCALE[match[2]] if match else None


def one_line(error: BaseException) -> str:
    """The first informative line of an exception (XLA's messages run to pages)."""
    text = str(error).strip() or type(error).__name__
    return re.sub(r"\s+", " ", text.splitlines()[0])[:400]


def compile_one(name: str, build, tokens: int) -> Program:
    """Compiles `build()` (-> a jax Lowered); the error in one line if anything refuses."""
    try:
        lowered = build()
        compiled = lowered.compile()
    except Exception as error:  # the compiler's refusal is a result here, not a crash
        return Program(name, error=one_line(error), tokens=tokens)
    kernels = lowered.as_text().count("tpu_custom_call")
    return dataclasses.replace(_analyse(name, compiled, tokens), pallas_kernels=kernels)


def lower_train(target: Target, state):
    prepared, parallel = target.prepared, target.parallel
    step = steps.make_train_step(
        prepared.model, prepared.optimizer, prepared.train_cfg, parallel.num_devices
    )
    batch = batch_of(target, "train")
    jitted = parallel.jit_train(step, state)
    if parallel.kind == "pmap":
        n = target.topology.num_chips
        return jitted.lower(_stacked(state, n), _per_device_rows(batch, n))
    return jitted.lower(state, batch)


def _eval_placement(target: Target, state):
    """The state as the trainer's evaluation sees it: placed as for training (jit), or one
    replica on one device (pmap); and the shardings of a batch's rows and of a replicated
    argument there."""
    parallel = target.parallel
    if parallel.kind == "pmap":
        one = SingleDeviceSharding(target.topology.devices[0])
        return _placed(state, jax.tree.map(lambda _: one, state)), one, one
    mesh = parallel.mesh
    placed = _placed(state, state_shardings(mesh, state))
    return placed, parallel.batch_sharding(), NamedSharding(mesh, PartitionSpec())


def _place_rest(args, sharding):
    """Arguments not placed yet (ShapeDtypeStructs without a sharding) get `sharding`."""

    def place(x):
        if isinstance(x, ShapeDtypeStruct) and x.sharding is None:
            return ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
        return x

    return jax.tree.map(place, args)


def lower_eval(target: Target, state):
    prepared = target.prepared
    eval_fn = jax.jit(
        functools.partial(
            steps.eval_step, model=prepared.model, diagnostics=prepared.train_cfg.diagnostics
        )
    )
    placed, rows, _ = _eval_placement(target, state)
    return eval_fn.lower(placed, _place_rest(batch_of(target, "eval"), rows))


def lower_eval_program(target: Target, state, program: evaluators.EvalProgram):
    """An evaluator's program over the run's placed state, its batch placed as the evaluator
    places it (rows over the devices, or host arrays: replicated)."""
    placed, rows, replicated = _eval_placement(target, state)
    args = _place_rest(program.args(placed), rows if program.rows else replicated)
    return program.fn.lower(*args)


def traffic(target: Target, state) -> Traffic:
    """The train step's analytic HBM traffic per chip (aot/traffic.py)."""
    prepared, chips = target.prepared, target.topology.num_chips
    train_cfg = prepared.train_cfg
    return train_step_traffic(
        prepared.model_config,
        rows=prepared.batch_size // chips,
        lengths=split_lengths(prepared.info, "train"),
        param_bytes=tree_bytes(state.params),
        optimizer_bytes=tree_bytes(state.opt_state),
        fsdp=train_cfg.fsdp if target.parallel.kind == "jit" else 1,
        grad_accum_steps=train_cfg.grad_accum_steps,
    )


def compile_train(target: Target, state=None) -> Program:
    state = abstract_state(target) if state is None else state
    tokens = tokens_per_call(target, "train")
    program = compile_one("train", lambda: lower_train(target, state), tokens)
    return dataclasses.replace(program, traffic=traffic(target, state))


def unrolled_model(target: Target) -> Target | None:
    """`target` with its layers (or a Universal Transformer's steps) unrolled, or None when its
    model has no loop. XLA's cost analysis counts the body of a loop once, whatever its trip
    count, so a looped program's FLOPs and bytes are counted on this equivalent instead."""
    prepared = target.prepared
    cfg = prepared.model_config
    recurrent = cfg.universal is not None and not cfg.universal.unroll
    if not cfg.scan_layers and not recurrent:
        return None
    model_config = cfg.override(
        {"scan_layers": False, **({"universal.unroll": True} if recurrent else {})}
    )
    equivalent = dataclasses.replace(
        prepared, model_config=model_config, model=build_model(model_config)
    )
    return Target(equivalent, target.topology)


def unrolled(target: Target) -> Target | None:
    """The train step of one micro-batch with its model unrolled (`unrolled_model`), or None
    when the step has no loop: a `lax.scan` over grad-accumulation micro-batches hides its
    counts as a loop over layers does, so they come from this equivalent, times the
    micro-batches (which counts the optimizer update k times instead of once: a small
    overstatement)."""
    k = target.prepared.train_cfg.grad_accum_steps
    model = unrolled_model(target)
    if model is None and k == 1:
        return None
    prepared = (model or target).prepared
    equivalent = dataclasses.replace(
        prepared,
        batch_size=prepared.batch_size // k,
        train_cfg=dataclasses.replace(prepared.train_cfg, grad_accum_steps=1),
    )
    return Target(equivalent, target.topology)


def counted_on(program: Program, equivalent: Program, times: int = 1) -> Program:
    """`program` (its memory its own) with the FLOPs and bytes of its unrolled `equivalent`,
    `times` over: zero when the equivalent did not compile (a refused Program counts none)."""
    return dataclasses.replace(
        program,
        flops=times * equivalent.flops,
        bytes_accessed=times * equivalent.bytes_accessed,
    )


def compile_train_counted(target: Target, state=None) -> Program:
    """The train step, with FLOPs and bytes accessed counted on `unrolled(target)` when its
    loops would hide them (see there); its memory is always its own."""
    program = compile_train(target, state)
    equivalent = unrolled(target)
    if equivalent is None or not program.compiled:
        return program
    return counted_on(
        program, compile_train(equivalent), target.prepared.train_cfg.grad_accum_steps
    )


def compile_eval_counted(target: Target, state) -> Program:
    """The eval step, counted on `unrolled_model(target)` where its model loops."""
    tokens = tokens_per_call(target, "eval")
    program = compile_one("eval", lambda: lower_eval(target, state), tokens)
    equivalent = unrolled_model(target)
    if equivalent is None or not program.compiled:
        return program
    state = abstract_state(equivalent)
    return counted_on(program, compile_one("eval", lambda: lower_eval(equivalent, state), tokens))


def compile_group(target: Target, size: int) -> Program:
    """The train step of a run group of `size` members (train/seed_group.py) differing in
    learning rate and warmup, as a tuned sweep's cell trains its grid: one vmapped program over
    the stacked states, compiled for the slice; its counts from the unrolled equivalent where
    the step loops (`unrolled`), as the solo step's are."""
    seed_group.check_group_parallelism(target.prepared.train_cfg)
    scalars = {
        "learning_rate": np.full(size, target.prepared.train_cfg.learning_rate, np.float32),
        "warmup_steps": np.full(size, target.prepared.train_cfg.warmup_steps, np.int32),
    }

    def build(t: Target):
        return seed_group.lower_group_train(t.prepared, scalars, size, t.parallel)

    tokens = size * tokens_per_call(target, "train")
    program = compile_one(f"train, run group of {size}", lambda: build(target), tokens)
    equivalent = unrolled(target)
    if equivalent is None or not program.compiled:
        return program
    counted = compile_one(program.name, lambda: build(equivalent), tokens)
    return counted_on(program, counted, target.prepared.train_cfg.grad_accum_steps)


def compile_programs(target: Target, *, decode: bool = True) -> list[Program]:
    """Train step, eval step and (unless `decode` is False) the programs the run's evaluators
    declare (their decoding), each compiled or with its error."""
    state = abstract_state(target)
    programs = [
        compile_train_counted(target, state),
        compile_eval_counted(target, state),
    ]
    if not decode:
        return programs
    for name, program in evaluators.programs(target.prepared).items():
        compiled = compile_one(
            name, lambda p=program: lower_eval_program(target, state, p), program.tokens
        )
        programs.append(dataclasses.replace(compiled, loops=True))
    return programs
