"""What a resume may change: a run directory's config against the config it is resumed with.

A resume refuses, before it touches the run directory, a change that would make its checkpoint
mean something else (another model, other data, an optimizer state built by other settings);
the changes it accepts are recorded in config.json with the step where they took effect
(run_dir.record_resume), and the config of the first steps is never overwritten.
"""

from pathlib import Path

from transformer_jax import fields as F
from transformer_jax import run_dir
from transformer_jax.config.model import upgrade_flat_model_config

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
    previous = run_dir.read_run_config(workdir)  # a damaged one is refused, never skipped
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
        old, new = F.flatten(old), F.flatten(resolved.get(section, {}))
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
