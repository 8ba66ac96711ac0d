"""`train_and_evaluate(config, workdir)`: one training run, the loop's group of one.

`prepare` validates everything a run needs (data, model, optimizer, evaluators) and builds it,
before anything compiles or any run directory changes; seed groups (train/seed_group.py) share
it, and transformer_jax.aot compiles it for a TPU slice from the data's facts alone. The loop
itself, resume, logging, evaluation, checkpoints, early stopping, signals and the summary, is
train/loop.py, which drives this file's `SoloProgram`: the run's train state on the
devices, laid out by `train.parallelism` (train/parallel.py), stepped by the compiled train step.
A non-finite loss writes a "diverged" summary and raises `NonFiniteError`; a checkpoint that
cannot be saved (a full disk) writes a "failed" one and raises `CheckpointSaveError`, both leaving
the last good checkpoint untouched. The files of the run directory are described in
transformer_jax/run_dir.py. In a multi-process run (a pod slice; train/multihost.py) every process
runs the loop on its rows of each batch and takes part in every checkpoint; process 0 alone writes
the other files, and a signal to any process stops all of them at the same step.
"""

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections

from transformer_jax import data, run_dir
from transformer_jax import fields as F
from transformer_jax.config import ModelConfig, TrainConfig
from transformer_jax.config.model import splash_refusal
from transformer_jax.data import tokenizers
from transformer_jax.defaults import FROM_DATA
from transformer_jax.layers.attention import resolve_impl
from transformer_jax.models import FAMILIES, build_model
from transformer_jax.train import evaluators, fits
from transformer_jax.train import step as steps
from transformer_jax.train.loop import train_runs
from transformer_jax.train.optimizer import make_optimizer
from transformer_jax.train.parallel import Parallel, check_parallel_config, setup_runtime
from transformer_jax.train.resume import resume_changes
from transformer_jax.train.timing import Phases


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
    if not family.reads_images:
        check_token_ids(model_config.tokens, info)
    return model_config


def check_token_ids(tokens, info: data.DatasetInfo) -> None:
    """model.tokens must name the dataset's own special ids: the loss masks `pad_id` and the
    decoder starts from `bos_id`, so another id would mask or read real tokens."""
    for name in ("pad_id", "bos_id", "eos_id"):
        ours, theirs = getattr(tokens, name), getattr(info, name)
        want = -1 if theirs is None else theirs  # model.tokens' "none"
        if ours != want:
            raise ValueError(
                f"model.tokens.{name}={ours} differs from dataset {info.name!r}'s "
                f"{name}={theirs}; set model.tokens.{name}={want}"
            )


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


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a run builds from its config before it touches a run directory, all validated: the
    one description of a run, which the trainer runs and transformer_jax.aot compiles."""

    train_cfg: TrainConfig
    info: data.DatasetInfo
    model_config: ModelConfig  # with its "auto" choices made for `platform`
    model: Any  # the flax module
    optimizer: Any  # the optax transformation
    resolved: dict  # config.json: the config with the model and train fields resolved
    batch_size: int  # data.batch_size, the global batch
    platform: str  # the jax platform its programs compile for: "cpu", "gpu", "tpu"
    dataset: data.Dataset | None = None  # None: described only (`prepare`'s compile_for)
    eval_sets: dict = dataclasses.field(default_factory=dict)  # split -> its evaluation batches


# Attention implementations that run on one platform only, and where.
_IMPL_PLATFORMS = {"splash": "tpu", "cudnn": "gpu"}


def for_platform(model_config: ModelConfig, platform: str, num_devices: int = 1) -> ModelConfig:
    """`model_config` with the choices written "auto" made for `num_devices` devices of
    `platform` (the attention implementation: layers/attention.py `resolve_impl`), whatever
    this process runs on. The splash kernel runs on one chip: the programs are jitted over the
    devices, and XLA's partitioner cannot split a Pallas kernel over the batch."""
    impl = model_config.attention.impl
    needs = _IMPL_PLATFORMS.get(impl)
    if needs is not None and needs != platform:
        raise ValueError(
            f"model.attention.impl={impl!r} runs on {needs.upper()}s only; this run compiles "
            f"for {platform}; valid: auto, jax, einsum"
        )
    if impl == "splash" and num_devices > 1:
        raise ValueError(
            f"model.attention.impl='splash' runs on one TPU chip, not {num_devices}; valid: "
            "auto (the jax path on a slice), jax, einsum"
        )
    splash_ok = num_devices == 1 and splash_refusal(model_config) is None
    impl = resolve_impl(impl, platform, splash_ok=splash_ok)
    return model_config.override({"attention.impl": impl})


def prepare(
    config: ml_collections.ConfigDict,
    phases: Phases | None = None,
    *,
    compile_for: Sequence | None = None,
) -> Prepared:
    """Validates `config` (data, model, optimizer, evaluators) and builds them, before anything
    compiles; the data's share of the time goes to `phases`' "data".

    `compile_for`: the devices the run's programs are compiled for without being run (a TPU
    slice's compile-only devices, transformer_jax.aot): the same checks against their number,
    the data described from its facts (`data.describe_dataset`: nothing read or downloaded, no
    evaluation batches), "auto" choices made for their platform, and this process's runtime
    (multi-host, compilation cache) left alone."""
    phases = phases or Phases()
    train_cfg = evaluators.check_blocks(TrainConfig.from_dict(config.train.to_dict()))
    F.check_seed("config.seed", config.seed)
    F.check_int("data.batch_size", config.data.batch_size, 1)
    num_devices = None if compile_for is None else len(compile_for)
    check_parallel_config(train_cfg, config.data.batch_size, num_devices)
    # Every check the data's description allows, before the data is built (or downloaded) and
    # before the runtime starts: a bad value leaves no data directory behind.
    described = data.describe_dataset(config.data, build=False)  # None: read to be described
    if described is not None:
        checked = _check_model(config, train_cfg, described)
    if compile_for is None:
        setup_runtime(train_cfg)  # Multi-host and compilation cache: before any computation.
    run_devices = jax.devices() if compile_for is None else list(compile_for)
    platform = run_devices[0].platform
    if described is not None:
        _check_platform(checked, train_cfg, config.data.batch_size, described, run_devices)
    with phases("data"):
        if compile_for is None:
            dataset = data.load_dataset(config.data)  # The only load of the data in a run.
            info = dataset.info
        else:
            dataset, info = None, described or data.describe_dataset(config.data)
    model_config = _check_model(config, train_cfg, info)
    if described is None:
        _check_platform(model_config, train_cfg, config.data.batch_size, info, run_devices)
    # config.json keeps "auto" as written: a resume on another platform resolves it afresh.
    resolved = config.to_dict()
    resolved["model"] = model_config.to_dict()
    resolved["train"] = train_cfg.to_dict()
    devices = jax.device_count() if compile_for is None else len(compile_for)
    model_config = for_platform(model_config, platform, devices)
    model = build_model(model_config)
    optimizer = make_optimizer(train_cfg, model_config.d_model)
    eval_sets = {}
    if dataset is not None:
        with phases("data"):
            eval_sets = {
                split: dataset.eval_batches(
                    split,
                    batch_size=config.data.batch_size,
                    max_examples=train_cfg.eval_examples or None,
                )
                for split in info.eval_splits
            }
    batch_size = config.data.batch_size
    return Prepared(
        train_cfg,
        info,
        model_config,
        model,
        optimizer,
        resolved,
        batch_size,
        platform,
        dataset,
        eval_sets,
    )


def _check_model(config, train_cfg: TrainConfig, info: data.DatasetInfo) -> ModelConfig:
    """The model config resolved from the data, after every check of the config against the
    data (its families, lengths, splits and early-stopping split)."""
    model_config = resolve_model_config(config, info)
    evaluators.check_splits(train_cfg, info)
    decodes = train_cfg.evaluators.get("generation", {}).get("enabled", False)
    if model_config.scan_layers and info.kind == "seq2seq" and decodes:
        raise ValueError(
            "model.scan_layers=True cannot decode with the KV cache that the generation "
            "evaluator uses; set train.evaluators.generation.enabled=False or "
            "model.scan_layers=False"
        )
    early_stop_split = train_cfg.early_stop_metric.partition("/")[0]
    if train_cfg.early_stop_metric and early_stop_split not in info.eval_splits:
        raise ValueError(
            f"train.early_stop_metric={train_cfg.early_stop_metric!r} reads split "
            f"{early_stop_split!r}, which {info.name} does not evaluate; valid splits: "
            f"{list(info.eval_splits)}"
        )
    evaluators.check_early_stop(train_cfg, info, model_config)
    return model_config


def _check_platform(model_config, train_cfg, batch_size: int, info, devices) -> None:
    """Refuses a model its `devices` cannot run (an attention implementation of another
    platform) or whose training cannot fit their memory (train/fits.py)."""
    for_platform(model_config, devices[0].platform, len(devices))
    lengths = (info.max_input_len, info.max_target_len)
    limit = fits.machine_bytes(devices)
    fits.check_fits(model_config, train_cfg, batch_size, lengths, limit)


def sample_batch(prepared: Prepared):
    """An evaluation batch: the shapes that initialise the parameters."""
    return next(iter(next(iter(prepared.eval_sets.values()))))


class SoloProgram:
    """One run's train state on the devices (laid out by `parallel`), stepped by the run's
    compiled train step; the loop's Program (train/loop.py) for a run of its own."""

    def __init__(self, prepared: Prepared, parallel: Parallel, seed: int, phases: Phases):
        model, optimizer, train_cfg = prepared.model, prepared.optimizer, prepared.train_cfg
        self._parallel = parallel
        with phases("init"):
            initial = steps.init_state(
                model, optimizer, sample_batch(prepared), jax.random.PRNGKey(seed)
            )
            self._state = parallel.place_state(initial)
        self.num_params = steps.count_params(initial.params)
        self._train_fn = parallel.compile_train(
            steps.make_train_step(model, optimizer, train_cfg, parallel.num_devices), self._state
        )

    def initial_states(self) -> list:
        return [self._parallel.host_state(self._state)]

    def start(self, states: Sequence) -> None:
        (state,) = states
        self._state = self._parallel.place_state(state)

    def step(self, batches: Sequence):
        (batch,) = batches
        self._state, metrics = self._train_fn(self._state, batch)
        return metrics

    def lane(self, metrics, i: int) -> dict:
        return metrics

    def state(self, i: int):
        return self._state

    def host_state(self, i: int):
        return self._parallel.host_state(self._state)

    def opt_state(self, i: int):
        return self._parallel.host_state(self._state.opt_state)


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str,
    phases: Phases | None = None,
    *,
    evaluate_finished: bool = False,
) -> run_dir.RunSummary:
    """Trains and evaluates `config` in `workdir`, resuming it if it holds checkpoints.

    Returns the summary written to summary.json, or a "stopped" one (not written) when a
    signal stopped the run; raises NonFiniteError (train/numerics.py) after writing a
    "diverged" one. A run that finished with this very config is not touched: its summary is
    returned as it is, unless `evaluate_finished` (its final state evaluated again). `phases`
    (default: a new one) times the run; a caller that passes its own reads more of it than the
    summary holds (its CPU time: benchmarks/loop_cost.py).
    """
    run_dir.check_layout(Path(workdir).expanduser(), group=False)
    phases = phases or Phases()  # Where the wall time goes; see train/timing.py.
    prepared = prepare(config, phases)
    done = None if evaluate_finished else finished(Path(workdir).expanduser(), prepared)
    if done is not None:
        print(
            f"{run_dir.shown(workdir)} finished at step {done.step} with this config "
            "(summary.json): nothing to train. --evaluate_finished evaluates it again."
        )
        return done

    def make_program(parallel, seeds, phases):
        return SoloProgram(prepared, parallel, seeds[0], phases)

    # A divergence raises on every process: the loss is the global one.
    runs = train_runs(
        prepared, [config.seed], [Path(workdir)], make_program, phases, raise_divergence=True
    )
    return runs[0]


def finished(workdir: Path, prepared: Prepared) -> run_dir.RunSummary | None:
    """The summary of `workdir` when it holds a finished run whose config a resume with
    `prepared`'s would not change (a longer `train.steps`, say, trains on); else None. Refuses
    (ValueError) what a resume refuses: other data's tokenizer, a damaged or edited summary or
    metrics.jsonl."""
    if not run_dir.has_checkpoints(workdir):
        return None
    summary = run_dir.read_summary(workdir)
    if summary is None or summary.status != "finished":
        return None
    tokenizers.check_stored_tokenizer(workdir, prepared.info.tokenizer)
    run_dir.check_metrics(workdir)  # the lines the summary closed, as they were written
    return summary if not resume_changes(workdir, prepared.resolved) else None
