"""Evaluators: what a run measures on its evaluation splits, one class per kind of evaluation.

An evaluator is the small interface below (`Evaluator`): its `name` (its key in
`train.evaluators`), `at_end` (whether the last evaluation of a run does more than the others,
e.g. decode the test split) and `evaluate`, which adds its metrics to the evaluation's results
(split -> metric -> value; the loop writes them to metrics.jsonl) and may write files to the
run directory; `summary_fields` are what it records in summary.json, under its name in the
summary's `extras` (run_dir.RunSummary).

`train.evaluators` gives each evaluator a block (config/eval_blocks.py): `every` (its cadence:
it runs every `every` steps and at the end), `splits`, `prefix` (put before each metric name it
logs) and its own options. The registry below maps a name to an `EvaluatorEntry`: a builder
`(EvalContext) -> Evaluator | None` that reads its block from `context.block` and returns None
when its evaluation does not apply to the run (decoding on a language model, BLEU not enabled),
so the default blocks keep each run's behaviour; its own `options` with their defaults and a
`check` of their values; the `splits` it can measure on a dataset; and `programs`, the compiled
functions beyond the eval step it would run (its decoding), described from a prepared run alone,
which transformer_jax.aot compiles for a TPU slice. Evaluators run in the registry's order.
Adding an evaluation is its class and registered entry (here, or in a module of its own that
this one imports, as train/bleu_eval.py) and its test; the loop, the run-directory contract and
the ahead-of-time compiler are unchanged.
"""

import dataclasses
import fnmatch
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import jax
import numpy as np
from jax import ShapeDtypeStruct

from transformer_jax import decoding
from transformer_jax import fields as F
from transformer_jax.config import eval_blocks
from transformer_jax.data.abstract import abstract_batch, longest_lengths
from transformer_jax.families import family_of
from transformer_jax.registry import Registry
from transformer_jax.train import bleu_eval, compile_ahead, curve_metrics, length_eval
from transformer_jax.train import step as steps
from transformer_jax.train.timing import Phases

Results = dict[str, dict[str, float]]  # split -> metric name -> value


class Evaluator(Protocol):
    """One kind of evaluation of a run's train state; see the module docstring."""

    name: str
    at_end: bool  # the last evaluation does more (decodes, writes files): rerun it at an early stop

    def evaluate(self, state, results: Results, *, final: bool) -> None:
        """Adds this evaluation of `state` (placed as the run's train state) to `results`;
        `final`: the run's last evaluation."""

    def summary_fields(self) -> dict[str, Any]:
        """What it records in summary.json, as its `extras[name]` (field -> value); {} if none."""


@dataclasses.dataclass(frozen=True)
class EvalContext:
    """What a builder may use: the prepared run (train/trainer.py's Prepared), its device layout
    (train/parallel.py), its batch size, directory and phase timer, `shared`, compiled
    functions the runs of one seed group share (`shared_fn`), and `block`, the evaluator's own
    block of train.evaluators (every key filled in)."""

    prepared: Any
    parallel: Any
    batch_size: int
    workdir: Path
    phases: Phases
    shared: dict = dataclasses.field(default_factory=dict)
    block: dict = dataclasses.field(default_factory=dict)
    # A group's runs: their shared vmapped evaluation (train/group_eval.py) and this run's lane.
    group: Any = None
    lane: int = 0

    def splits(self, default) -> tuple[str, ...]:
        """The block's `splits`, or `default` when it names none."""
        return self.block["splits"] or tuple(default)

    def shared_fn(self, key: str, build):
        """`build()`, once per group: its runs then compile it once."""
        if key not in self.shared:
            self.shared[key] = build()
        return self.shared[key]


@dataclasses.dataclass(frozen=True)
class EvalProgram:
    """A compiled function an evaluator runs, described for compiling it from shapes alone
    (transformer_jax.aot): it calls `fn` (jitted) as `fn(*args(state))`, `state` the run's train
    state as the evaluator sees it, the other arguments ShapeDtypeStructs; `rows`: its batch
    is placed over the devices as evaluation batches are (Parallel.wrap_eval), else it passes
    host arrays. `tokens`: the tokens one call decodes at most, all rows."""

    fn: Callable
    args: Callable[[Any], tuple]
    rows: bool
    tokens: int


def _no_programs(prepared) -> dict[str, EvalProgram]:
    return {}


def _no_check(field: str, block: dict) -> None:
    return None


def _eval_splits(info) -> tuple[str, ...]:
    return tuple(info.eval_splits)


def _undeclared(train_cfg, info, model_config, block) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class EvaluatorEntry:
    """One registered evaluator: `build(EvalContext) -> Evaluator | None` (see the module
    docstring); `programs(prepared) -> {name: EvalProgram}`, the compiled functions beyond the
    eval step that it runs for a prepared run (train/trainer.py's Prepared; {} when none or when
    it does not apply), raising the ValueError its builder would; `options`, the keys of its
    block beyond the common ones, with their defaults; `check(field, block)`, a ValueError naming
    `field.<option>` for an option value it cannot take; `splits(info)`, the evaluation splits
    its block may name on a dataset (data.DatasetInfo); `metrics(train_cfg, info, model_config,
    block)`, the names of the metrics it logs in a run (before its prefix, shell-style patterns
    where a name depends on the model: `*/*`; () where it does not apply), or None where it does
    not declare them (then an early-stopping metric is checked at
    the first evaluation instead of before training)."""

    build: Callable[[EvalContext], Evaluator | None]
    programs: Callable[[Any], dict[str, EvalProgram]] = _no_programs
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    check: Callable[[str, dict], None] = _no_check
    splits: Callable[[Any], tuple[str, ...]] = _eval_splits
    metrics: Callable[..., tuple[str, ...] | None] = _undeclared


EVALUATORS: Registry[EvaluatorEntry] = Registry("train.evaluators")


def sum_over_batches(eval_fn, state, batches) -> dict[str, float]:
    """Sums of (value, count) pairs of `eval_fn(state, batch)` over `batches`, divided."""
    totals = {}
    for batch in batches:
        for name, (value, count) in jax.device_get(eval_fn(state, batch)).items():
            s, c = totals.get(name, (0.0, 0.0))
            totals[name] = (s + float(value), c + float(count))
    return {name: s / max(c, 1.0) for name, (s, c) in totals.items()}


class TeacherForced:
    """Loss, token and sequence accuracy (and with train.diagnostics the attention statistics)
    of every evaluation split, the model reading the reference prefix (train/step.py)."""

    name = "teacher_forced"
    at_end = False

    def __init__(self, eval_fn, eval_sets: dict):
        self._eval_fn = eval_fn  # (placed state, host batch) -> sums
        self._eval_sets = eval_sets  # split -> batches

    def evaluate(self, state, results: Results, *, final: bool) -> None:
        for split, batches in self._eval_sets.items():
            results.setdefault(split, {}).update(sum_over_batches(self._eval_fn, state, batches))

    def ahead(self) -> list:
        return compile_ahead.pairs(self._eval_fn, self._eval_sets)

    def summary_fields(self) -> dict[str, Any]:
        return {}


class GenerationAccuracy:
    """gen_seq_accuracy of seq2seq splits: greedy decoding, the decoder reading its own
    outputs, scored by exact match with the target (transformer_jax.decoding); timed as
    "decode"."""

    name = "generation"
    at_end = False

    def __init__(self, generate_fn, eval_sets: dict, phases: Phases):
        self._generate_fn = generate_fn
        self._eval_sets = eval_sets  # the decoded splits' batches
        self._phases = phases

    def evaluate(self, state, results: Results, *, final: bool) -> None:
        with self._phases("decode"):
            for split, batches in self._eval_sets.items():
                scores = sum_over_batches(self._generate_fn, state, batches)
                results.setdefault(split, {}).update(scores)

    def ahead(self) -> list:
        return compile_ahead.pairs(self._generate_fn, self._eval_sets)

    def summary_fields(self) -> dict[str, Any]:
        return {}


def _generation_step(model):
    @jax.jit
    def generation_eval(state, batch):
        return decoding.generation_accuracy(state.variables, batch, model=model)

    return generation_eval


def _teacher_forced(context: EvalContext) -> TeacherForced:
    prepared = context.prepared
    eval_step = functools.partial(
        steps.eval_step, model=prepared.model, diagnostics=prepared.train_cfg.diagnostics
    )
    eval_sets = {split: prepared.eval_sets[split] for split in context.splits(prepared.eval_sets)}
    if context.group is not None:  # One vmapped eval step for the group's stacked states.
        return TeacherForced(context.group.lane_fn("eval_step", eval_step, context.lane), eval_sets)
    eval_fn = context.shared_fn("eval_step", lambda: context.parallel.wrap_eval(jax.jit(eval_step)))
    return TeacherForced(eval_fn, eval_sets)


def generates(prepared) -> bool:
    """Whether the "generation" evaluator decodes in this run: seq2seq data, enabled."""
    block = prepared.train_cfg.evaluators.get("generation")
    return prepared.info.kind == "seq2seq" and block is not None and block["enabled"]


def _generated_splits(prepared) -> tuple[str, ...]:
    return prepared.train_cfg.evaluators["generation"]["splits"] or prepared.info.eval_splits


def _generation(context: EvalContext) -> GenerationAccuracy | None:
    prepared = context.prepared
    if not generates(prepared):
        return None
    generate_fn = context.shared_fn(
        "generation_step", lambda: context.parallel.wrap_eval(_generation_step(prepared.model))
    )
    eval_sets = {split: prepared.eval_sets[split] for split in _generated_splits(prepared)}
    return GenerationAccuracy(generate_fn, eval_sets, context.phases)


def _generation_programs(prepared) -> dict[str, EvalProgram]:
    """Greedy decoding of evaluation batches, at the longest of the decoded splits."""
    if not generates(prepared):
        return {}
    lengths = longest_lengths(prepared.info, _generated_splits(prepared))
    data_config = prepared.resolved["data"]
    batch = abstract_batch(prepared.info, data_config, prepared.batch_size, lengths)
    return {
        "generation": EvalProgram(
            _generation_step(prepared.model),
            lambda state: (state, batch),
            rows=True,
            tokens=prepared.batch_size * lengths[1],
        )
    }


def _bleu(context: EvalContext) -> bleu_eval.BleuEvaluator | None:
    prepared = context.prepared
    if not context.block["enabled"]:
        return None
    return bleu_eval.BleuEvaluator(
        prepared.dataset,
        context.batch_size,
        context.block,
        prepared.model,
        context.workdir,
        context.parallel,
        context.phases,
    )


def _bleu_programs(prepared) -> dict[str, EvalProgram]:
    """The greedy and beam decoding of the test split's sources (train/bleu_eval.py)."""
    block = prepared.train_cfg.evaluators["bleu"]
    if not block["enabled"]:
        return {}
    info, model = prepared.info, prepared.model
    bleu_eval.check_splits(info)
    shape = bleu_eval.input_shape(info, prepared.batch_size)
    fns = bleu_eval.generate_fns(model, block, info, prepared.batch_size)

    def args(state):
        inputs = ShapeDtypeStruct(shape, np.int32)
        return state.variables, inputs, ShapeDtypeStruct((2,), np.uint32)

    # The target length the generate functions decode: the evaluation's.
    tokens = shape[0] * info.padded_lengths("test")[1]
    return {f"bleu_{name}": EvalProgram(fn, args, False, tokens) for name, fn in fns.items()}


def _own_options(name: str) -> dict[str, Any]:
    """The options of a shipped evaluator's default block beyond the common keys."""
    block = eval_blocks.DEFAULT_EVALUATORS[name]
    return {key: value for key, value in block.items() if key not in eval_blocks.COMMON_KEYS}


def _generation_check(field: str, block: dict) -> None:
    F.check_bool(f"{field}.enabled", block["enabled"])


def _bleu_check(field: str, block: dict) -> None:
    F.check_bool(f"{field}.enabled", block["enabled"])
    F.check_int(f"{field}.examples", block["examples"], 0)
    F.check_int(f"{field}.beam_size", block["beam_size"], 1)
    F.check_float(f"{field}.beam_alpha", block["beam_alpha"], at_least=0.0)


def _length_programs(prepared) -> dict[str, EvalProgram]:
    """The per-position loss at the long windows' shapes (train/length_eval.py)."""
    if not length_eval.enabled(prepared):
        return {}
    block = prepared.train_cfg.evaluators[length_eval.NAME]
    _, length = length_eval.window_length(prepared, block)
    model = length_eval.eval_model(prepared, length, block["factor"])
    batch = length_eval.long_batch(prepared, length)
    fn = jax.jit(length_eval.position_step(model))
    tokens = prepared.batch_size * length
    return {length_eval.NAME: EvalProgram(fn, lambda state: (state, batch), True, tokens)}


def _teacher_forced_metrics(train_cfg, info, model_config, block) -> tuple[str, ...]:
    """train/step.py's eval_step: loss, the family's accuracy, sequence accuracy; with
    train.diagnostics also the statistics the layers sow, each `<statistic>/<layer path>`."""
    family = family_of(model_config)
    names = ("loss", family.accuracy_name, *(() if family.classifier else ("seq_accuracy",)))
    return (*names, "*/*") if train_cfg.diagnostics else names


def _generation_metrics(train_cfg, info, model_config, block) -> tuple[str, ...]:
    return ("gen_seq_accuracy",) if info.kind == "seq2seq" and block["enabled"] else ()


def _when_enabled_undeclared(train_cfg, info, model_config, block) -> tuple[str, ...] | None:
    """Nothing when off; when on, metrics named from the data or options: not declared."""
    return None if block["enabled"] else ()


EVALUATORS.add("teacher_forced", EvaluatorEntry(_teacher_forced, metrics=_teacher_forced_metrics))
EVALUATORS.add(
    "generation",
    EvaluatorEntry(
        _generation,
        programs=_generation_programs,
        options=_own_options("generation"),
        check=_generation_check,
        metrics=_generation_metrics,
    ),
)
EVALUATORS.add(
    "bleu",
    EvaluatorEntry(
        _bleu,
        programs=_bleu_programs,
        options=_own_options("bleu"),
        check=_bleu_check,
        splits=bleu_eval.splits,
        metrics=_when_enabled_undeclared,
    ),
)
EVALUATORS.add(
    length_eval.NAME,
    EvaluatorEntry(
        length_eval.build,
        programs=_length_programs,
        options=_own_options(length_eval.NAME),
        check=length_eval.check,
        metrics=_when_enabled_undeclared,
    ),
)


def check_blocks(train_cfg):
    """`train_cfg` (a TrainConfig) with each block of train.evaluators checked against its
    registered evaluator and its own options filled in from their defaults; a ValueError names
    an unknown evaluator, an unknown key of a block or a bad option value, with what is valid."""
    blocks = {}
    for name, block in train_cfg.evaluators.items():
        if name not in EVALUATORS:
            raise ValueError(
                f"train.evaluators.{name}: no such evaluator; valid: {EVALUATORS.names()}"
            )
        entry, field = EVALUATORS[name], f"train.evaluators.{name}"
        valid = [*eval_blocks.COMMON_KEYS, *entry.options]
        unknown = sorted(set(block) - set(valid))
        if unknown:
            raise ValueError(
                f"{field}.{unknown[0]}={block[unknown[0]]!r}: {name} has no such option; "
                f"valid keys of {field}: {valid}"
            )
        blocks[name] = {**entry.options, **block}
        entry.check(field, blocks[name])
    return train_cfg.replace(evaluators=blocks)


def check_splits(train_cfg, info) -> None:
    """A ValueError naming the block whose `splits` names a split its evaluator cannot measure
    on the dataset (`info`, data.DatasetInfo), with the valid ones."""
    for name, block in train_cfg.evaluators.items():
        valid = EVALUATORS[name].splits(info)
        for split in block["splits"]:
            if split not in valid:
                raise ValueError(
                    f"train.evaluators.{name}.splits contains {split!r}, which {name} cannot "
                    f"measure on {info.name}; valid splits: {list(valid)}"
                )


def check_early_stop(train_cfg, info, model_config) -> None:
    """A ValueError naming train.early_stop_metric when no evaluator of the run logs it (the
    curve metrics, train/curve_metrics.py, counted with the loss they follow), with the ones
    logged; nothing where an evaluator of the run does not declare its metrics."""
    metric = train_cfg.early_stop_metric
    if not metric:
        return
    logged: list[str] = []
    for name, block in train_cfg.evaluators.items():
        names = EVALUATORS[name].metrics(train_cfg, info, model_config, block)
        if names is None:
            return
        logged += [block["prefix"] + n for n in names]
    if "loss" in logged:  # the curve metrics of the unprefixed loss
        logged.append(curve_metrics.MEAN_LOSS)
        if train_cfg.loss_threshold > 0:
            logged.append(curve_metrics.STEPS_TO_THRESHOLD)
    split, _, name = metric.partition("/")
    if not any(fnmatch.fnmatchcase(name, pattern) for pattern in logged):
        valid = [f"{split}/{n}" for n in dict.fromkeys(logged)]
        raise ValueError(
            f"train.early_stop_metric={metric!r}: no evaluator of the run logs {name!r}; the "
            f"metrics logged on {split}: {valid}"
        )


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """An evaluator with its block's cadence (`every`, in steps) and metric-name `prefix`."""

    name: str
    evaluator: Evaluator
    every: int
    prefix: str

    def due(self, step: int, *, last: bool) -> bool:
        """Whether it evaluates after `step`; `last`: the run's last step."""
        return last or step % self.every == 0


def build_evaluators(train_cfg, context: EvalContext) -> list[Scheduled]:
    """The evaluators of train.evaluators that apply to the run, in the registry's order."""
    found = []
    for name in EVALUATORS:
        block = train_cfg.evaluators.get(name)
        if block is None:
            continue
        evaluator = EVALUATORS[name].build(dataclasses.replace(context, block=block))
        if evaluator is not None:
            found.append(Scheduled(name, evaluator, block["every"], block["prefix"]))
    return found


def programs(prepared) -> dict[str, EvalProgram]:
    """The compiled functions beyond the eval step that `prepared`'s evaluators run, by name."""
    found = {}
    for name in EVALUATORS:
        if name in prepared.train_cfg.evaluators:
            found.update(EVALUATORS[name].programs(prepared))
    return found


def evaluate(scheduled: list[Scheduled], state, *, final: bool, phases: Phases) -> Results:
    """One evaluation of `state` by the evaluators `scheduled` (those due), timed as "eval"
    (decoding as "decode"); each one's metric names carry its block's prefix."""
    results: Results = {}
    with phases("eval"):
        for item in scheduled:
            own: Results = {}
            item.evaluator.evaluate(state, own, final=final)
            for split, metrics in own.items():
                named = {item.prefix + name: value for name, value in metrics.items()}
                results.setdefault(split, {}).update(named)
    return results
