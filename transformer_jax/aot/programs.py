"""The programs a run executes, compiled ahead of time for a TPU slice from abstract shapes.

`plan_run` validates a config as the trainer does and resolves it against a topology; then
`compile_programs` lowers and compiles, with the trainer's own builders (train/step.py,
train/parallel.py, transformer_jax.decoding): the train step with the run's shardings (jit data
parallel or fsdp, or pmap), the eval step, and for families that decode, the greedy and beam
decoding programs of an evaluation (as train/bleu_eval.py builds them; a decoder-only model
continues prompts of half its context). Shapes come from the data's facts (shapes.py), so
nothing is read, allocated or run; the compiler's memory and cost analyses are the result.
"""

import dataclasses
import functools
import re
from typing import Any

import jax
import ml_collections
import numpy as np
from jax import ShapeDtypeStruct
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from transformer_jax import decoding
from transformer_jax import fields as F
from transformer_jax.aot import shapes
from transformer_jax.aot.topology import Topology
from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.data.info import DatasetInfo
from transformer_jax.families import family_of
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.optimizer import make_optimizer
from transformer_jax.train.parallel import (
    Parallel,
    check_parallel_config,
    make_parallel,
    state_shardings,
)
from transformer_jax.train.trainer import resolve_model_config


@dataclasses.dataclass(frozen=True)
class Plan:
    """A config resolved for a topology, validated, before anything compiles."""

    config: ml_collections.ConfigDict
    train_cfg: TrainConfig
    info: DatasetInfo
    model_config: ModelConfig
    model: Any
    optimizer: Any
    topology: Topology
    parallel: Parallel

    @property
    def batch_size(self) -> int:
        return self.config.data.batch_size


def plan_run(config: ml_collections.ConfigDict, topology: Topology) -> Plan:
    """Checks `config` as the trainer does (fields, batch over the chips, model against the
    data) for `topology`'s chips; ValueErrors name the field."""
    train_cfg = TrainConfig.from_dict(config.train.to_dict())
    F.check_int("data.batch_size", config.data.batch_size, 1)
    check_parallel_config(train_cfg, config.data.batch_size, topology.num_chips)
    info = shapes.planned_info(config.data)
    model_config = resolve_model_config(config, info)
    model = build_model(model_config)
    optimizer = make_optimizer(train_cfg, model_config.d_model)
    parallel = make_parallel(train_cfg, topology.devices)
    return Plan(config, train_cfg, info, model_config, model, optimizer, topology, parallel)


def with_batch_size(plan: Plan, batch_size: int) -> Plan:
    """The same plan at another global batch size (checked over the chips)."""
    config = ml_collections.ConfigDict(plan.config.to_dict())
    config.data.batch_size = batch_size
    check_parallel_config(plan.train_cfg, batch_size, plan.topology.num_chips)
    return dataclasses.replace(plan, config=config)


@dataclasses.dataclass(frozen=True)
class Program:
    """One compiled program (or the compiler's refusal) and what it processes per call."""

    name: str  # train | eval | decode_greedy | decode_beam
    error: str = ""  # the compiler's (or a builder's) error in one line; "" when compiled
    memory: dict[str, int] = dataclasses.field(default_factory=dict)  # bytes per chip
    flops: float = 0.0  # XLA's count, per chip
    bytes_accessed: float = 0.0  # XLA's count, per chip
    tokens: int = 0  # tokens (images for classifiers) one call processes, all chips
    loops: bool = False  # a decoding loop, which XLA's counts hold once: no time estimate

    @property
    def compiled(self) -> bool:
        return not self.error

    @property
    def total_bytes(self) -> int:
        """Peak HBM per chip: arguments and outputs (less what donation aliases), temporaries
        and the program's code."""
        m = self.memory
        return m["arguments"] + m["outputs"] - m["aliased"] + m["temporaries"] + m["code"]


def abstract_state(plan: Plan):
    """The TrainState as ShapeDtypeStructs, from the trainer's own initialiser."""
    one_row = shapes.zeros_like(shapes.abstract_batch(plan.info, plan.config.data, 1, "train"))
    init = steps.make_init(plan.model, plan.optimizer, one_row)
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


def tokens_per_call(plan: Plan, batch_size: int, split: str) -> int:
    """Target tokens (lm, seq2seq) or images (classifiers) of one batch: what a run's tokens/s
    counts, padding included."""
    if plan.info.kind == "classification":
        return batch_size
    return batch_size * shapes.split_lengths(plan.info, split)[1]


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
        compiled = build().compile()
    except Exception as error:  # the compiler's refusal is a result here, not a crash
        return Program(name, error=one_line(error), tokens=tokens)
    return _analyse(name, compiled, tokens)


def lower_train(plan: Plan, state):
    step = steps.make_train_step(
        plan.model, plan.optimizer, plan.train_cfg, plan.parallel.num_devices
    )
    batch = shapes.abstract_batch(plan.info, plan.config.data, plan.batch_size, "train")
    jitted = plan.parallel.jit_train(step, state)
    if plan.parallel.kind == "pmap":
        n = plan.topology.num_chips
        return jitted.lower(_stacked(state, n), _per_device_rows(batch, n))
    return jitted.lower(state, batch)


def _eval_placement(plan: Plan, state, batch):
    """State and batch as the trainer's evaluation sees them: placed as for training (jit), or
    one replica on one device (pmap)."""
    if plan.parallel.kind == "pmap":
        one = SingleDeviceSharding(plan.topology.devices[0])
        return (
            _placed(state, jax.tree.map(lambda _: one, state)),
            _placed(batch, jax.tree.map(lambda _: one, batch)),
        )
    mesh = plan.parallel.mesh
    rows = plan.parallel.batch_sharding()
    return (
        _placed(state, state_shardings(mesh, state)),
        _placed(batch, jax.tree.map(lambda _: rows, batch)),
    )


def lower_eval(plan: Plan, state):
    eval_fn = jax.jit(
        functools.partial(steps.eval_step, model=plan.model, diagnostics=plan.train_cfg.diagnostics)
    )
    batch = shapes.abstract_batch(plan.info, plan.config.data, plan.batch_size, "eval")
    return eval_fn.lower(*_eval_placement(plan, state, batch))


def decode_configs(plan: Plan) -> dict[str, tuple[decoding.DecodeConfig, tuple[int, int]]]:
    """name -> (DecodeConfig, input shape) of the decoding programs an evaluation runs."""
    family = family_of(plan.model_config)
    if family.decodes is None:
        return {}
    input_len, target_len = shapes.split_lengths(plan.info, "eval")
    if family.decodes == "source":  # as train/bleu_eval.py: the test split's lengths
        shape, new_tokens = (plan.batch_size, input_len), target_len
    else:  # a prompt of half the context, then up to decoding's default of new tokens
        shape, new_tokens = (plan.batch_size, max(target_len // 2, 1)), 0
    beam = plan.train_cfg
    return {
        "decode_greedy": (decoding.DecodeConfig("greedy", max_new_tokens=new_tokens), shape),
        "decode_beam": (
            decoding.DecodeConfig(
                "beam",
                beam_size=beam.beam_size,
                alpha=beam.beam_alpha,
                max_new_tokens=new_tokens,
            ),
            shape,
        ),
    }


def lower_decode(plan: Plan, state, decode_config: decoding.DecodeConfig, shape):
    """The generate program over the run's placed parameters (an evaluation decodes with the
    trained state as it lies on the devices), inputs replicated."""
    generate = decoding.make_generate_fn(plan.model, decode_config, shape)
    variables = {"params": state.params}
    if state.batch_stats:
        variables["batch_stats"] = state.batch_stats
    placed_state, _ = _eval_placement(plan, state, {})
    placed = {"params": placed_state.params}
    if state.batch_stats:
        placed["batch_stats"] = placed_state.batch_stats
    if plan.parallel.kind == "pmap":
        replicated = SingleDeviceSharding(plan.topology.devices[0])
    else:
        replicated = NamedSharding(plan.parallel.mesh, PartitionSpec())
    inputs = ShapeDtypeStruct(shape, np.int32, sharding=replicated)
    rng = ShapeDtypeStruct((2,), np.uint32, sharding=replicated)
    return generate.lower(placed, inputs, rng)


def decode_tokens(plan: Plan, decode_config: decoding.DecodeConfig, shape) -> int:
    """Output tokens one decoding call produces at most, all rows."""
    new = decoding.resolve_max_new_tokens(plan.model_config, decode_config, shape[1])
    return shape[0] * new


def compile_train(plan: Plan, state=None) -> Program:
    state = abstract_state(plan) if state is None else state
    tokens = tokens_per_call(plan, plan.batch_size, "train")
    return compile_one("train", lambda: lower_train(plan, state), tokens)


def unrolled(plan: Plan) -> Plan | None:
    """The train step of one micro-batch with its layers unrolled, or None when the step has
    neither loop. XLA's cost analysis counts the body of a loop once, whatever its trip count
    (a `lax.scan` over layers or over grad-accumulation micro-batches alike), so the counts of
    such a step come from this equivalent instead, times the micro-batches (which counts the
    optimizer update k times instead of once: a small overstatement)."""
    k = plan.train_cfg.grad_accum_steps
    if not plan.model_config.scan_layers and k == 1:
        return None
    model_config = plan.model_config.override({"scan_layers": False})
    config = ml_collections.ConfigDict(plan.config.to_dict())
    config.data.batch_size = plan.batch_size // k
    return dataclasses.replace(
        plan,
        config=config,
        train_cfg=dataclasses.replace(plan.train_cfg, grad_accum_steps=1),
        model_config=model_config,
        model=build_model(model_config),
    )


def compile_train_counted(plan: Plan, state=None) -> Program:
    """The train step, with FLOPs and bytes accessed counted on `unrolled(plan)` when its loops
    would hide them (see there); its memory is always its own."""
    program = compile_train(plan, state)
    equivalent = unrolled(plan)
    if equivalent is None or not program.compiled:
        return program
    counted = compile_train(equivalent)
    if not counted.compiled:
        return dataclasses.replace(program, flops=0.0, bytes_accessed=0.0)
    k = plan.train_cfg.grad_accum_steps
    return dataclasses.replace(
        program, flops=k * counted.flops, bytes_accessed=k * counted.bytes_accessed
    )


def compile_programs(plan: Plan, *, decode: bool = True) -> list[Program]:
    """Train step, eval step and (for families that decode, unless `decode` is False) the
    greedy and beam decoding programs, each compiled or with its error."""
    state = abstract_state(plan)
    programs = [
        compile_train_counted(plan, state),
        compile_one(
            "eval",
            lambda: lower_eval(plan, state),
            tokens_per_call(plan, plan.batch_size, "eval"),
        ),
    ]
    if not decode:
        return programs
    for name, (decode_config, shape) in decode_configs(plan).items():
        try:
            tokens = decode_tokens(plan, decode_config, shape)
        except ValueError as error:
            programs.append(Program(name, error=one_line(error)))
            continue
        program = compile_one(
            name, lambda c=decode_config, s=shape: lower_decode(plan, state, c, s), tokens
        )
        programs.append(dataclasses.replace(program, loops=True))
    return programs
