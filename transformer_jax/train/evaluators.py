"""Evaluators: what a run measures on its evaluation splits, one class per kind of evaluation.

An evaluator is the small interface below (`Evaluator`): its `name` (as `train.evaluators`
lists it), `at_end` (whether the last evaluation of a run does more than the others, e.g.
decode the test split) and `evaluate`, which adds its metrics to the evaluation's results
(split -> metric -> value; the loop writes them to metrics.jsonl) and may write files to the
run directory; `summary_fields` are what it adds to summary.json. Every evaluator runs at each
evaluation (every `train.eval_every` steps and at the end), in the order `train.evaluators`
lists them, each seeing the results of those before it.

The registry below maps a name to an `EvaluatorEntry`: a builder `(EvalContext) -> Evaluator |
None`, which returns None when its evaluation does not apply to the run (decoding on a language
model, BLEU with `train.bleu` off), so the default list, every evaluator, keeps each run's
behaviour; and `programs`, the compiled functions beyond the eval step it would run (its
decoding), described from a prepared run alone, which transformer_jax.aot compiles for a TPU
slice. Adding an evaluation is one class, its registered entry and its test; the loop and the
ahead-of-time compiler are unchanged.
"""

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import jax
import numpy as np
from jax import ShapeDtypeStruct

from transformer_jax import decoding
from transformer_jax.data.abstract import abstract_batch, longest_lengths
from transformer_jax.registry import Registry
from transformer_jax.train import bleu_eval
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
        """summary.json fields this evaluator records (RunSummary field -> value); {} if none."""


@dataclasses.dataclass(frozen=True)
class EvalContext:
    """What a builder may use: the prepared run (train/trainer.py's Prepared), its device layout
    (train/parallel.py), its batch size, directory and phase timer, and `shared`, compiled
    functions the runs of one seed group share (`shared_fn`)."""

    prepared: Any
    parallel: Any
    batch_size: int
    workdir: Path
    phases: Phases
    shared: dict = dataclasses.field(default_factory=dict)
    # A group's runs: their shared vmapped evaluation (train/group_eval.py) and this run's lane.
    group: Any = None
    lane: int = 0

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


@dataclasses.dataclass(frozen=True)
class EvaluatorEntry:
    """One registered evaluator: `build(EvalContext) -> Evaluator | None` (see the module
    docstring) and `programs(prepared) -> {name: EvalProgram}`, the compiled functions beyond the
    eval step that it runs for a prepared run (train/trainer.py's Prepared; {} when none or when
    it does not apply), raising the ValueError its builder would."""

    build: Callable[[EvalContext], Evaluator | None]
    programs: Callable[[Any], dict[str, EvalProgram]] = _no_programs


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
    if context.group is not None:  # One vmapped eval step for the group's stacked states.
        return TeacherForced(
            context.group.lane_fn("eval_step", eval_step, context.lane), prepared.eval_sets
        )
    eval_fn = context.shared_fn("eval_step", lambda: context.parallel.wrap_eval(jax.jit(eval_step)))
    return TeacherForced(eval_fn, prepared.eval_sets)


def _generates(prepared) -> bool:
    return prepared.info.kind == "seq2seq" and prepared.train_cfg.generate_eval


def _generated_splits(prepared) -> tuple[str, ...]:
    return prepared.train_cfg.generate_eval_splits or prepared.info.eval_splits


def _generation(context: EvalContext) -> GenerationAccuracy | None:
    prepared = context.prepared
    if not _generates(prepared):
        return None
    generate_fn = context.shared_fn(
        "generation_step", lambda: context.parallel.wrap_eval(_generation_step(prepared.model))
    )
    eval_sets = {split: prepared.eval_sets[split] for split in _generated_splits(prepared)}
    return GenerationAccuracy(generate_fn, eval_sets, context.phases)


def _generation_programs(prepared) -> dict[str, EvalProgram]:
    """Greedy decoding of evaluation batches, at the longest of the decoded splits."""
    if not _generates(prepared):
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
    if not prepared.train_cfg.bleu:
        return None
    return bleu_eval.BleuEvaluator(
        prepared.dataset,
        context.batch_size,
        prepared.train_cfg,
        prepared.model,
        context.workdir,
        context.parallel,
        context.phases,
    )


def _bleu_programs(prepared) -> dict[str, EvalProgram]:
    """The greedy and beam decoding of the test split's sources (train/bleu_eval.py)."""
    if not prepared.train_cfg.bleu:
        return {}
    info, model = prepared.info, prepared.model
    bleu_eval.check_splits(info)
    shape = bleu_eval.input_shape(info, prepared.batch_size)
    fns = bleu_eval.generate_fns(model, prepared.train_cfg, info, prepared.batch_size)

    def args(state):
        inputs = ShapeDtypeStruct(shape, np.int32)
        return state.variables, inputs, ShapeDtypeStruct((2,), np.uint32)

    # The target length the generate functions decode: the evaluation's.
    tokens = shape[0] * info.padded_lengths("test")[1]
    return {f"bleu_{name}": EvalProgram(fn, args, False, tokens) for name, fn in fns.items()}


EVALUATORS.add("teacher_forced", EvaluatorEntry(_teacher_forced))
EVALUATORS.add("generation", EvaluatorEntry(_generation, _generation_programs))
EVALUATORS.add("bleu", EvaluatorEntry(_bleu, _bleu_programs))


def check_names(names) -> None:
    """A ValueError naming `train.evaluators` unless it lists registered evaluators, once each."""
    for name in names:
        EVALUATORS[name]  # raises, listing the valid names
    if len(set(names)) != len(names):
        raise ValueError(f"train.evaluators={names!r} lists an evaluator twice")


def build_evaluators(names, context: EvalContext) -> list[Evaluator]:
    """The evaluators `names` (train.evaluators) that apply to the run, in that order."""
    built = (EVALUATORS[name].build(context) for name in names)
    return [evaluator for evaluator in built if evaluator is not None]


def programs(prepared) -> dict[str, EvalProgram]:
    """The compiled functions beyond the eval step that `prepared`'s evaluators run, by name."""
    found = {}
    for name in prepared.train_cfg.evaluators:
        found.update(EVALUATORS[name].programs(prepared))
    return found


def evaluate(evaluators, state, *, final: bool, phases: Phases) -> Results:
    """One evaluation of `state` by every evaluator, timed as "eval" (decoding as "decode")."""
    results: Results = {}
    with phases("eval"):
        for evaluator in evaluators:
            evaluator.evaluate(state, results, final=final)
    return results
