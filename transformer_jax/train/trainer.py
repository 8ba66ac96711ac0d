"""`train_and_evaluate(config, workdir)`: the whole training run, as one readable loop.

Order of events: validate everything (data, model, optimizer) before compiling; restore the latest
checkpoint of `workdir` if there is one (parameters, optimizer, step, RNG and the data iterator
position, so a resumed run reproduces an uninterrupted one); then train, logging every `log_every`
steps, evaluating every `eval_every`, checkpointing every `checkpoint_every`; at the end (`steps`,
or an early stop, see train/early_stop.py) write `summary.json`. SIGTERM/SIGINT save a checkpoint
and return; a non-finite loss writes a "diverged" summary and raises `NonFiniteError`, and a
checkpoint that cannot be saved (a full disk) a "failed" one and raises `CheckpointSaveError`, both
leaving the last good checkpoint untouched. A checkpoint also holds the loop's partial logging
window and throughput so far, so that however a run is interrupted, its resumed metrics.jsonl
equals an uninterrupted run's. The files of the run directory are described in
transformer_jax/run_dir.py. In a multi-process run (a pod slice; train/multihost.py) every process
runs this loop on its rows of each batch and takes part in every checkpoint; process 0 alone writes
the other files, and a signal to any process stops all of them at the same step.
"""

import contextlib
import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from transformer_jax import data, decoding, run_dir
from transformer_jax import fields as F
from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.config.model import upgrade_flat_model_config
from transformer_jax.data import tokenizers
from transformer_jax.defaults import FROM_DATA
from transformer_jax.models import FAMILIES, build_model
from transformer_jax.train import multihost
from transformer_jax.train import step as steps
from transformer_jax.train.bleu_eval import BleuEvaluator
from transformer_jax.train.checkpoint import Checkpointer
from transformer_jax.train.early_stop import EarlyStopping
from transformer_jax.train.logger import MetricsLogger
from transformer_jax.train.numerics import NonFiniteError, check_finite
from transformer_jax.train.optimizer import current_learning_rate, make_optimizer
from transformer_jax.train.parallel import check_parallel_config, make_parallel, setup_runtime
from transformer_jax.train.signals import StopOnSignal
from transformer_jax.train.timing import Phases, breakdown_line


def resolve_model_config(config: ml_collections.ConfigDict, info: data.DatasetInfo) -> ModelConfig:
    """ModelConfig with vocabulary, classes, length and image shape filled from the dataset, then
    checked against it."""
    fields = config.model.to_dict()
    family = FAMILIES[fields["family"]]
    expected = [
        name
        for name in FAMILIES
        if FAMILIES[name].data_kind == info.kind
        and FAMILIES[name].reads_images == bool(info.image_shape)
    ]
    if family.name not in expected:
        raise ValueError(
            f"model.family={family.name!r} cannot train on the {info.kind} dataset "
            f"{info.name!r}; valid: {expected}"
        )
    if fields["vocab_size"] == FROM_DATA:
        fields["vocab_size"] = info.vocab_size
    if family.classifier:
        fields["num_classes"] = info.num_classes
    if family.reads_images:
        _fill_image_fields(fields["vit"], info)
    max_len = fields["positional"]["max_len"]
    fields["positional"]["max_len"] = 1  # placeholder until the longest sequence is known
    model_config = ModelConfig.from_dict(fields)
    longest = family.sequence_length(model_config, info.max_input_len, info.max_target_len)
    model_config = model_config.override(
        {"positional.max_len": longest if max_len == FROM_DATA else max_len}
    )
    if longest > model_config.positional.max_len:
        raise ValueError(
            f"model.positional.max_len={model_config.positional.max_len} is shorter than the "
            f"longest sequence of dataset {info.name!r} ({longest} tokens); set "
            f"model.positional.max_len >= {longest} or -1"
        )
    if model_config.vocab_size < info.vocab_size:
        raise ValueError(
            f"model.vocab_size={model_config.vocab_size} is smaller than the vocabulary of "
            f"dataset {info.name!r} ({info.vocab_size}); use -1 to take it from the data"
        )
    return model_config


def _fill_image_fields(vit: dict, info: data.DatasetInfo) -> None:
    """model.vit.image_size and model.vit.num_channels from the dataset when -1, else checked."""
    height, width, channels = info.image_shape
    if height != width:
        raise ValueError(
            f"dataset {info.name!r} has {height}x{width} images; the vit takes square images: "
            "set data.image_size to resize them"
        )
    for name, value in (("image_size", height), ("num_channels", channels)):
        if vit[name] == FROM_DATA:
            vit[name] = value
        elif vit[name] != value:
            raise ValueError(
                f"model.vit.{name}={vit[name]} does not match dataset {info.name!r} "
                f"({height}x{width}x{channels} images); use -1 to take it from the data"
                + (" or set data.image_size" if name == "image_size" else "")
            )


# What a resume may change, by dotted field: a model field that changes how, not what, the model
# computes, and the train fields outside _TRAIN_FIXED_ON_RESUME. Every other model and data field
# and the seed are fixed. Accepted changes are recorded in config.json with the step where they
# took effect (run_dir.record_resume); the config of the first steps is never overwritten.
_MODEL_CHANGEABLE_ON_RESUME = {"attention.impl"}
# The restored optimizer state was built by these: optax.inject_hyperparams stores b1, b2, eps and
# weight_decay in it (a new value would be silently replaced by the stored one), grad_clip_norm
# and momentum decide its structure, and the optimizer and schedule family say what its moments
# and step count mean. learning_rate, warmup_steps and steps only reshape the schedule: allowed.
_TRAIN_FIXED_ON_RESUME = ("optimizer", "schedule", "b1", "b2", "eps", "weight_decay", "momentum")
_TRAIN_FIXED_ON_RESUME += ("grad_clip_norm",)


def resume_changes(workdir: Path, resolved: dict) -> dict[str, dict]:
    """The changes a resume of `workdir` with `resolved` makes, as {"train.steps": {"from": 60,
    "to": 80}}; raises a ValueError naming the field for a change a resume may not make.

    Compared with the config of the latest process (config.json plus its recorded resumes). Only
    fields present in both are compared, so a field added to the code later (with a default that
    keeps the old behaviour) does not lock old run directories. Reads, never writes.
    """
    previous = run_dir.read_config(workdir)
    if previous is None:
        return {}
    previous = run_dir.effective_config(previous)
    if previous.get("seed") != resolved.get("seed"):
        raise ValueError(
            f"workdir {workdir} holds a run with config.seed={previous.get('seed')!r}, not "
            f"{resolved.get('seed')!r}; use a new --workdir or the same seed"
        )
    changes = {}
    for section in ("model", "data", "train"):
        old = previous.get(section, {})
        if section == "model":  # Run directories of any layout compare field by field.
            old = upgrade_flat_model_config(old)
        old, new = _flatten(old), _flatten(resolved.get(section, {}))
        changeable = {
            "model": _MODEL_CHANGEABLE_ON_RESUME,
            "data": set(),
            "train": set(old) - set(_TRAIN_FIXED_ON_RESUME),
        }[section]
        changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
        refused = [k for k in changed if k not in changeable]
        if refused:
            diffs = ", ".join(f"{section}.{k}: {old[k]!r} -> {new[k]!r}" for k in refused)
            why = " (the checkpointed optimizer state depends on it)" if section == "train" else ""
            raise ValueError(
                f"workdir {workdir} holds a run with a different config.{section} ({diffs})"
                f"{why}; a resume cannot change it: use a new --workdir or the same config"
            )
        changes.update({f"{section}.{k}": {"from": old[k], "to": new[k]} for k in changed})
    return changes


def _flatten(tree: dict, prefix: str = "") -> dict:
    """{"norm": {"kind": "dyt"}} -> {"norm.kind": "dyt"}; None sub-configs stay one field.
    Tuples become lists, as config.json stores them, so a stored and a fresh config compare."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def _host_average(window: list[dict]) -> dict[str, float]:
    """Averages per-step device metrics of a logging window on the host."""
    stacked = jax.device_get(window)
    out = {name: float(np.mean([m[name] for m in stacked])) for name in stacked[0]}
    out["tokens"] = float(np.sum([m["tokens"] for m in stacked]))
    return out


def window_to_json(window: list[dict]) -> dict:
    """The per-step metrics of a partial logging window, exactly (values with their dtypes),
    for the checkpoint: a resumed run completes the window as if it had never stopped."""
    stacked = jax.device_get(window)
    if not stacked:
        return {}
    dtypes = {name: str(np.asarray(value).dtype) for name, value in stacked[0].items()}
    return {"dtypes": dtypes, "steps": [{k: v.item() for k, v in m.items()} for m in stacked]}


def window_from_json(stored: dict) -> list[dict]:
    dtypes = stored.get("dtypes", {})
    return [{k: np.asarray(v, dtypes[k]) for k, v in m.items()} for m in stored.get("steps", [])]


def with_generation(eval_fn, model, phases: Phases | None = None):
    """eval_fn's sums plus gen_seq_accuracy: greedy decoding scored by exact match.

    One compile per eval batch shape, like eval_fn; see transformer_jax.decoding. With `phases`
    the decoding is timed as "decode" (waiting for it, which evaluation does anyway).
    """

    @jax.jit
    def generation_eval(state, batch):
        variables = {"params": state.params}
        if state.batch_stats:
            variables["batch_stats"] = state.batch_stats
        return decoding.generation_accuracy(variables, batch, model=model)

    def evaluate_batch(state, batch):
        sums = eval_fn(state, batch)
        with phases("decode") if phases else contextlib.nullcontext():
            return {**sums, **jax.block_until_ready(generation_eval(state, batch))}

    return evaluate_batch


def evaluate(eval_fns, state, eval_sets) -> dict[str, dict[str, float]]:
    """Each split's metrics: sums over its batches through its function of `eval_fns`, divided
    by their counts."""
    results = {}
    for split, batches in eval_sets.items():
        totals = {}
        for batch in batches:
            for name, (value, count) in jax.device_get(eval_fns[split](state, batch)).items():
                s, c = totals.get(name, (0.0, 0.0))
                totals[name] = (s + float(value), c + float(count))
        results[split] = {name: s / max(c, 1.0) for name, (s, c) in totals.items()}
    return results


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a run builds from its config before it touches a run directory, all validated."""

    train_cfg: TrainConfig
    dataset: data.Dataset
    model_config: ModelConfig
    model: Any  # the flax module
    optimizer: Any  # the optax transformation
    resolved: dict  # config.json: the config with the model and train fields resolved
    eval_sets: dict  # split -> its evaluation batches


def prepare(config: ml_collections.ConfigDict, phases: Phases | None = None) -> Prepared:
    """Validates `config` (data, model, optimizer) and builds them, before anything compiles;
    the data's share of the time goes to `phases`' "data"."""
    phases = phases or Phases()
    train_cfg = TrainConfig.from_dict(config.train.to_dict())
    setup_runtime(train_cfg)  # Multi-host and compilation cache: before any computation.
    F.check_int("data.batch_size", config.data.batch_size, 1)
    check_parallel_config(train_cfg, config.data.batch_size)
    with phases("data"):
        dataset = data.load_dataset(config.data)  # The only load of the data in a run.
    info = dataset.info
    model_config = resolve_model_config(config, info)
    if model_config.scan_layers and info.kind == "seq2seq" and train_cfg.generate_eval:
        raise ValueError(
            "model.scan_layers=True cannot decode with the KV cache that train.generate_eval "
            "uses; set train.generate_eval=False or model.scan_layers=False"
        )
    model = build_model(model_config)
    optimizer = make_optimizer(train_cfg, model_config.d_model)

    resolved = config.to_dict()
    resolved["model"] = model_config.to_dict()
    resolved["train"] = train_cfg.to_dict()
    with phases("data"):
        eval_sets = {
            split: dataset.eval_batches(
                split,
                batch_size=config.data.batch_size,
                max_examples=train_cfg.eval_examples or None,
            )
            for split in info.eval_splits
        }
    for split in train_cfg.generate_eval_splits:
        if split not in info.eval_splits:
            raise ValueError(
                f"train.generate_eval_splits contains {split!r}, which {info.name} does not "
                f"evaluate; valid splits: {list(info.eval_splits)}"
            )
    early_stop_split = train_cfg.early_stop_metric.partition("/")[0]
    if train_cfg.early_stop_metric and early_stop_split not in info.eval_splits:
        raise ValueError(
            f"train.early_stop_metric={train_cfg.early_stop_metric!r} reads split "
            f"{early_stop_split!r}, which {info.name} does not evaluate; valid splits: "
            f"{list(info.eval_splits)}"
        )
    return Prepared(train_cfg, dataset, model_config, model, optimizer, resolved, eval_sets)


def make_eval_fns(prepared: Prepared, parallel, phases: Phases | None = None) -> dict:
    """Split -> the run's evaluation of one state on one batch of it: sums, plus greedy decoding
    (timed as `phases`' "decode") for the seq2seq splits train.generate_eval(_splits) names."""
    train_cfg, model, info = prepared.train_cfg, prepared.model, prepared.dataset.info
    eval_fn = jax.jit(
        functools.partial(steps.eval_step, model=model, diagnostics=train_cfg.diagnostics)
    )
    fns = dict.fromkeys(info.eval_splits, parallel.wrap_eval(eval_fn))
    if info.kind == "seq2seq" and train_cfg.generate_eval:
        decoding = parallel.wrap_eval(with_generation(eval_fn, model, phases))
        fns.update(dict.fromkeys(train_cfg.generate_eval_splits or info.eval_splits, decoding))
    return fns


def train_line(window: list[dict], elapsed_s: float, opt_state) -> dict[str, float]:
    """The train line of metrics.jsonl for a logging window of per-step metrics."""
    averaged = _host_average(window)
    averaged["tokens_per_sec"] = averaged.pop("tokens") / elapsed_s
    averaged["learning_rate"] = float(current_learning_rate(opt_state))
    return averaged


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> run_dir.RunSummary:
    """Trains and evaluates `config` in `workdir`, resuming it if it holds checkpoints.

    Returns the summary written to summary.json, or a "stopped" one (not written) when a
    signal stopped the run.
    """
    workdir = Path(workdir).expanduser()
    phases = Phases()  # Where the wall time goes; see train/timing.py.
    prepared = prepare(config, phases)
    train_cfg, model, optimizer = prepared.train_cfg, prepared.model, prepared.optimizer
    dataset, model_config, resolved = prepared.dataset, prepared.model_config, prepared.resolved
    info, eval_sets = dataset.info, prepared.eval_sets
    # A resume refuses before touching the workdir: data whose tokenizer is not the run's (the
    # same ids would mean other text), then any config change it may not make.
    has_tokenizer = tokenizers.check_stored_tokenizer(workdir, info.tokenizer)
    changes = resume_changes(workdir, resolved)

    train_iter = dataset.train_iterator(seed=config.seed, batch_size=config.data.batch_size)
    bleu = None
    if train_cfg.bleu:
        bleu = BleuEvaluator(dataset, config.data.batch_size, train_cfg, model, workdir)
    sample = next(iter(next(iter(eval_sets.values()))))
    parallel = make_parallel(train_cfg)  # Train state on the devices; see train/parallel.py.
    with phases("init"):
        state = steps.init_state(model, optimizer, sample, jax.random.PRNGKey(config.seed))
        state = parallel.place_state(state)
    num_params = steps.count_params(state.params)
    train_fn = parallel.compile_train(
        steps.make_train_step(model, optimizer, train_cfg, parallel.num_devices), state
    )
    eval_fns = make_eval_fns(prepared, parallel, phases)

    def evaluate_all(state, final: bool) -> dict[str, dict[str, float]]:
        with phases("eval"):
            results = evaluate(eval_fns, state, eval_sets)
            if bleu is not None:
                with phases("decode"):
                    bleu.add_to(results, parallel.host_state(state), final=final)
        return results

    # Everything is validated: only now does the run directory change (a config that fails a
    # check must not leave a config.json that locks the workdir to it).
    workdir.mkdir(parents=True, exist_ok=True)
    # Process 0 alone writes the run directory's files (checkpoints aside: every process takes
    # part in saves and restores); see train/multihost.py.
    primary = multihost.is_primary()
    # Held until this function returns (or the process dies).
    lock = run_dir.lock_run(workdir) if primary else None
    checkpointer = Checkpointer(
        workdir,
        every=train_cfg.checkpoint_every,
        keep=train_cfg.keep_checkpoints,
        fallback=train_cfg.restore_fallback,
        primary=primary,
    )
    logger = MetricsLogger(workdir, total_steps=train_cfg.steps, writes=primary, config=resolved)
    # The placed state's shardings are the restore target, so a checkpoint written on any
    # number of devices loads onto this run's devices.
    with phases("checkpoint"):
        restored = checkpointer.restore(parallel.host_state(state))
    if restored is not None:
        state, data_state = restored
        train_iter.set_state(data_state)
        logger.truncate_after(int(state.step))
        loop = checkpointer.restore_loop_state(int(state.step))
        if changes and primary:
            run_dir.record_resume(workdir, int(state.step), changes)
        print(f"Resumed {workdir} at step {int(state.step)}.", flush=True)
        state = parallel.place_state(state)
    else:
        logger.truncate_after(0)  # Lines of a process killed before its first checkpoint.
        loop = {}
        if primary:  # Nothing trained yet: this config is the run's.
            run_dir.write_config(workdir, resolved)
        print(f"{model_config.family}: {num_params:,} parameters.", flush=True)
    if info.tokenizer is not None and not has_tokenizer and primary:
        if restored is not None:
            print(
                f"{workdir} stores no tokenizer (it predates them): storing the one rebuilt "
                f"from {info.tokenizer.source}, assumed to be the one it trained with.",
                flush=True,
            )
        tokenizers.write_tokenizer(info.tokenizer, workdir)

    step = int(parallel.host_state(state).step)
    # The logging window in progress (steps since the last train line, restored when a signal
    # stopped the run mid-window) and the tokens/s of every earlier process's windows.
    window = window_from_json(loop.get("window", {}))
    window_start = time.perf_counter() - loop.get("window_elapsed_s", 0.0)
    rates = list(loop.get("rates", []))
    compiling = True  # This process's first window includes compilation: not a rate.
    final_metrics = {}
    early_stop = None
    if train_cfg.early_stop_metric:
        early_stop = EarlyStopping.from_state(
            loop.get("early_stop", {}),
            metric=train_cfg.early_stop_metric,
            patience=train_cfg.early_stop_patience,
            min_delta=train_cfg.early_stop_min_delta,
            min_steps=train_cfg.early_stop_min_steps,
        )

    def loop_state() -> dict:
        elapsed = time.perf_counter() - window_start
        state = {"window": window_to_json(window), "window_elapsed_s": elapsed, "rates": rates}
        if early_stop is not None:
            state["early_stop"] = early_stop.summary()
        return state

    def stopped_early() -> bool:
        return early_stop is not None and early_stop.stopped

    def outcome(status: run_dir.Status, at: int, **fields) -> run_dir.RunSummary:
        return run_dir.RunSummary(
            status=status,
            step=at,
            metrics=final_metrics,
            num_params=num_params,
            wall_time_s=logger.elapsed(),
            timing=phases.breakdown(),
            **fields,
        )

    first_step = step
    try:
        with StopOnSignal() as stop, phases("train"):
            while step < train_cfg.steps and not stopped_early():
                # The first call traces and compiles; its execution is asynchronous.
                with phases("compile") if step == first_step else contextlib.nullcontext():
                    state, metrics = train_fn(state, next(train_iter))
                step += 1
                window.append(metrics)
                logged = step % train_cfg.log_every == 0 or step == train_cfg.steps
                if logged:
                    # Dispatch is asynchronous: wait for the window's steps before reading the
                    # clock, or the window's rate counts only their dispatch.
                    jax.block_until_ready(window)
                    elapsed = time.perf_counter() - window_start
                    opt_state = parallel.host_state(state.opt_state)
                    averaged = train_line(window, elapsed, opt_state)
                    logger.write(step, "train", averaged)  # A diverged window is logged too.
                    check_finite(step, averaged)
                    if not compiling:
                        rates.append(averaged["tokens_per_sec"])
                    window, window_start, compiling = [], time.perf_counter(), False
                if step % train_cfg.eval_every == 0 or step == train_cfg.steps:
                    final_metrics = evaluate_all(state, final=step == train_cfg.steps)
                    for split, values in final_metrics.items():
                        logger.write(step, split, values)
                    if early_stop is not None and early_stop.update(step, final_metrics):
                        print(
                            f"Early stop at step {step}: {early_stop.summary()['reason']}.",
                            flush=True,
                        )
                    window_start = time.perf_counter()
                # A signal may reach one process only (a preempted host): all stop together.
                stopping = multihost.any_process(stop.stop_requested())
                if logged or stopping:  # The checkpointer saves when due; a signal forces it.
                    with phases("checkpoint"):
                        checkpointer.save(
                            step,
                            parallel.host_state(state),
                            train_iter.get_state(),
                            loop_state=loop_state(),
                            force=stopping,
                        )
                if stopping:
                    with phases("checkpoint"):
                        checkpointer.wait_until_finished()
                    print(f"Stopped by signal at step {step}; checkpoint saved.", flush=True)
                    return outcome("stopped", step)
        with phases("checkpoint"):
            host_state = parallel.host_state(state)
            checkpointer.save(
                step, host_state, train_iter.get_state(), loop_state=loop_state(), force=True
            )
            checkpointer.wait_until_finished()  # On disk before the summary says "finished".
        # Resumed at the end (the last step, or stopped early): evaluate the restored state. An
        # early stop's last evaluation was not the final one that decodes the BLEU test split.
        if not final_metrics or (stopped_early() and bleu is not None):
            final_metrics = evaluate_all(state, final=True)
        summary = outcome(
            "finished",
            step,
            tokens_per_sec=float(np.median(rates)) if rates else None,
            bleu=bleu.summary() if bleu is not None else None,
            early_stop=early_stop.summary() if early_stop is not None else None,
        )
        logger.write_summary(summary)  # Process 0 writes it.
        print(breakdown_line(summary.timing), flush=True)
        return summary
    except NonFiniteError as error:  # Raised on every process: the loss is the global one.
        logger.write_summary(outcome("diverged", error.step, error=str(error)))
        raise
    except OSError as error:  # CheckpointSaveError, or another write on the same full disk
        cause = checkpointer.failed_save() or error  # The failed save, if one did, says why.
        # The full disk may not take the summary either; the raised error still says why.
        with contextlib.suppress(OSError):
            logger.write_summary(outcome("failed", step, error=str(cause)))
        if cause is error:
            raise
        raise cause from error
    finally:
        checkpointer.close()
        logger.close()
        if lock is not None:
            lock.close()
