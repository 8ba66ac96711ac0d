"""The typed training configuration: built once from `config.train`, the one source of its
defaults (the ConfigDict of every config file is made from this dataclass)."""

import copy
import dataclasses
import importlib.util
from collections.abc import Mapping
from typing import Any, ClassVar

from transformer_jax import fields as F
from transformer_jax.config.eval_blocks import (
    check_blocks,
    default_evaluators,
    upgrade_train_fields,
)

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("rsqrt", "cosine", "constant")
PARALLELISMS = ("jit", "pmap")
THREEFRY_MODES = ("auto", "partitionable", "sequential")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimizer, schedule, logging cadence and scale-out of a training run."""

    PREFIX: ClassVar[str] = "train"

    steps: int = 2000  # optimizer updates in the whole run
    optimizer: str = "adam"  # adam | adamw | sgd
    learning_rate: float = 1e-3  # peak rate (cosine/constant) or multiplier of the paper's (rsqrt)
    schedule: str = "cosine"  # rsqrt (the paper's warmup + 1/sqrt) | cosine | constant
    warmup_steps: int = 200  # linear warmup, in steps
    b1: float = 0.9  # Adam beta1
    b2: float = 0.98  # Adam beta2 (the paper: 0.98)
    eps: float = 1e-9  # Adam epsilon (the paper: 1e-9)
    weight_decay: float = 0.0  # decoupled weight decay, adamw only
    momentum: float = 0.0  # heavy-ball momentum, sgd only
    grad_clip_norm: float = 1.0  # clip the global gradient norm; 0 = no clipping
    label_smoothing: float = 0.0  # the paper: 0.1
    log_every: int = 50  # steps between train-metric log lines
    eval_every: int = 500  # steps between evaluations (and at the end): every block's default
    eval_examples: int = 0  # examples per eval split; 0 = the whole split
    checkpoint_every: int = 500  # steps between checkpoints (a multiple of log_every)
    keep_checkpoints: int = 2  # newest checkpoints kept on disk
    # A resume whose latest checkpoint is damaged (its bytes differ from the checksums recorded
    # at its save) moves it to checkpoints_damaged/ and restores the one before; False refuses
    # by name (train/checkpoint.py).
    restore_fallback: bool = False
    diagnostics: bool = True  # attention entropy / max weight / logit std per layer at eval
    # What each evaluation measures: evaluator name -> its block (every, splits, prefix and its
    # own options; config/eval_blocks.py), run in this order. The default blocks: "teacher_forced"
    # (loss, accuracies), "generation" (seq2seq: gen_seq_accuracy) and "bleu" (translation,
    # enabled=False). One that does not apply to the run is skipped.
    evaluators: dict[str, dict[str, Any]] = dataclasses.field(default_factory=default_evaluators)
    # Scale-out (see transformer_jax.train.parallel). data.batch_size is the global batch: it
    # must divide evenly over the devices (and the micro-batches).
    parallelism: str = "jit"  # jit: one program over a device mesh (GSPMD) | pmap: replicated
    fsdp: int = 1  # jit only: mesh axis size that shards parameters and optimizer state (ZeRO-3)
    grad_accum_steps: int = 1  # micro-batches per update; the update equals one full-batch step
    distributed: bool = False  # multi-host: call jax.distributed.initialize() first (TPU pods)
    # Persistent XLA compilation cache (train/compile_cache.py): "" the user's (~/.cache/
    # transformer_jax/xla, bounded; a JAX_COMPILATION_CACHE_DIR set wins), "off", or a directory.
    compilation_cache_dir: str = ""
    # Compile the evaluations' programs on a thread while training runs rather than at the first
    # evaluation (train/compile_ahead.py); the same programs, so the same results.
    compile_ahead: bool = True
    # Dropout's random bits: "partitionable" (the same masks however the batch is sharded),
    # "sequential" (faster on CPUs) or "auto" (sequential on one device); see train/step.py.
    threefry: str = "auto"
    # Early stopping (train/early_stop.py): "" trains all `steps`; "split/metric" (e.g.
    # "test/seq_accuracy", an eval split and a logged metric; names ending in "loss" must fall,
    # others rise) stops after early_stop_patience evaluations in a row without an improvement
    # larger than early_stop_min_delta, from early_stop_min_steps on. `steps` stays the upper
    # bound.
    early_stop_metric: str = ""
    early_stop_patience: int = 5  # evaluations
    early_stop_min_delta: float = 0.0
    early_stop_min_steps: int = 0  # never stop before this step
    # Each eval split's steps_to_threshold: the first evaluation step whose loss is <= this;
    # 0 = not logged (train/curve_metrics.py; every split's mean_loss is logged regardless).
    loss_threshold: float = 0.0
    # Weights & Biases project to log the run to ("" = off; wandb is then never imported): one
    # W&B run per training run (transformer_jax/tracking/wandb_run.py); WANDB_MODE=offline
    # logs without network or account.
    wandb_project: str = ""
    # Fine-tuning: a run directory (e.g. one written by python -m transformer_jax.convert)
    # whose latest checkpoint's parameters this run starts from, at step 0 with a fresh
    # optimizer state (train/init_from.py); "" = off (a random initialisation). The run's own
    # checkpoint, once it has one, is what a resume restores.
    init_from: str = ""
    # A jax.profiler trace of the steps that take the step counter from start to stop, written
    # to RUN/profile/ (train/profile.py; docs/speed.md reads it); () or None = off.
    profile_steps: tuple[int, ...] | None = ()

    def __post_init__(self):
        for name in ("steps", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints"):
            F.check_int(f"train.{name}", getattr(self, name), 1)
        for name in ("warmup_steps", "eval_examples"):
            F.check_int(f"train.{name}", getattr(self, name), 0)
        for name in ("fsdp", "grad_accum_steps"):
            F.check_int(f"train.{name}", getattr(self, name), 1)
        F.check_choice("train.optimizer", self.optimizer, OPTIMIZERS)
        F.check_choice("train.schedule", self.schedule, SCHEDULES)
        F.check_choice("train.parallelism", self.parallelism, PARALLELISMS)
        F.check_choice("train.threefry", self.threefry, THREEFRY_MODES)
        F.check_float("train.learning_rate", self.learning_rate, above=0.0)
        for name in ("b1", "b2", "momentum", "label_smoothing"):
            F.check_float(f"train.{name}", getattr(self, name), at_least=0.0, below=1.0)
        F.check_float("train.eps", self.eps, above=0.0)
        F.check_float("train.weight_decay", self.weight_decay, at_least=0.0)
        F.check_float("train.grad_clip_norm", self.grad_clip_norm, at_least=0.0)
        F.check_int("train.early_stop_patience", self.early_stop_patience, 1)
        F.check_int("train.early_stop_min_steps", self.early_stop_min_steps, 0)
        F.check_float("train.early_stop_min_delta", self.early_stop_min_delta, at_least=0.0)
        F.check_float("train.loss_threshold", self.loss_threshold, at_least=0.0)
        metric = self.early_stop_metric
        split, _, name = metric.partition("/") if isinstance(metric, str) else ("", "", "")
        if not isinstance(metric, str) or (metric and not (split and name)):
            raise ValueError(
                f"train.early_stop_metric={self.early_stop_metric!r} must be '' (off) or "
                "'split/metric', e.g. 'test/seq_accuracy'"
            )
        for name in ("diagnostics", "distributed", "restore_fallback", "compile_ahead"):
            F.check_bool(f"train.{name}", getattr(self, name))
        object.__setattr__(self, "evaluators", check_blocks(self.evaluators, self.eval_every))
        if not isinstance(self.wandb_project, str):
            raise ValueError(
                f"train.wandb_project={self.wandb_project!r} must be a W&B project name or '' (off)"
            )
        if self.wandb_project and importlib.util.find_spec("wandb") is None:
            raise ValueError(
                f"train.wandb_project={self.wandb_project!r} needs the wandb package, which is "
                "not installed: pip install -r requirements-wandb.txt, or set it to '' (off)"
            )
        if not isinstance(self.init_from, str):
            raise ValueError(
                f"train.init_from={self.init_from!r} must be a run directory or '' (off)"
            )
        if not isinstance(self.compilation_cache_dir, str):
            raise ValueError(
                f"train.compilation_cache_dir={self.compilation_cache_dir!r} must be a "
                "directory path, '' (the user's cache) or 'off'"
            )
        self._check_profile_steps()
        self._check_combinations()

    def _check_profile_steps(self):
        window = self.profile_steps
        if window is None or (isinstance(window, (tuple, list)) and not window):
            object.__setattr__(self, "profile_steps", ())  # off, however it was spelled
            return
        ints = isinstance(window, (tuple, list)) and len(window) == 2
        ints = ints and all(isinstance(x, int) and not isinstance(x, bool) for x in window)
        if not (ints and 0 <= window[0] < window[1] and window[0] < self.steps):
            raise ValueError(
                f"train.profile_steps={window!r} must be (start, stop), integers with 0 <= start "
                f"< stop and start < train.steps={self.steps}, e.g. (10, 15); () = off"
            )
        object.__setattr__(self, "profile_steps", tuple(window))

    def _check_combinations(self):
        if self.weight_decay and self.optimizer != "adamw":
            raise ValueError(
                f"train.weight_decay={self.weight_decay} needs train.optimizer='adamw', not "
                f"{self.optimizer!r}; valid for {self.optimizer!r}: 0.0"
            )
        if self.momentum and self.optimizer != "sgd":
            raise ValueError(
                f"train.momentum={self.momentum} applies to train.optimizer='sgd' only; "
                f"valid for {self.optimizer!r}: 0.0"
            )
        if self.schedule == "cosine" and self.warmup_steps >= self.steps:
            raise ValueError(
                f"train.warmup_steps={self.warmup_steps} must be < train.steps={self.steps} "
                "for the cosine schedule"
            )
        if self.checkpoint_every % self.log_every:
            raise ValueError(
                f"train.checkpoint_every={self.checkpoint_every} must be a multiple of "
                f"train.log_every={self.log_every}, so a resumed run logs the same windows"
            )
        if self.fsdp > 1 and self.parallelism != "jit":
            raise ValueError(
                f"train.fsdp={self.fsdp} needs train.parallelism='jit', not {self.parallelism!r}"
            )

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> "TrainConfig":
        """From `config.train.to_dict()` or a run's config.json, rejecting unknown fields; the
        fields evaluator blocks replaced are read into their blocks (`upgrade_train_fields`)."""
        return F.build(cls, upgrade_train_fields(fields), "train")

    def to_dict(self) -> dict:
        return copy.deepcopy(F.to_dict(self))

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)
