"""Command line: python -m transformer_jax.main --config=configs/algorithmic.py:copy --workdir=X

Override any field in the ml_collections style, e.g. --config.model.norm.kind=rmsnorm
--config.model.attention.scale=none --config.train.steps=500. Rerunning with the same workdir
resumes from its latest checkpoint. --print_config lists every field of the config with its
value, type and doc, and exits.

--seeds=0,1,2 trains the config once per seed as one seed group (transformer_jax/train/
seed_group.py): one vmapped program, seed s in WORKDIR/seed_<s>/ (config.seed is ignored), each
with the files of a run of its own.

--runs='{"lr-0.001/seed_0": {"seed": 0, "train.learning_rate": 0.001}, ...}' trains a run group
(the same file): one run per entry, in WORKDIR/<key>/, the config with that entry's overrides
(seed and the optimizer scalars of transformer_jax/train/group_fields.py), as one program. A
tuned sweep launches a cell's learning-rate x warmup x seed grid this way.
"""

import json
import sys
from pathlib import Path, PurePosixPath

from absl import app, flags, logging
from ml_collections import config_flags

from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.run_dir import DIVERGED_EXIT_CODE, STOPPED_EXIT_CODE
from transformer_jax.train.numerics import NonFiniteError
from transformer_jax.train.seed_group import train_run_group, train_seed_group
from transformer_jax.train.trainer import train_and_evaluate

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics, summary).")
_SEEDS = flags.DEFINE_list(
    "seeds", None, "Seeds to train as one seed group, in WORKDIR/seed_<seed>/ (e.g. 0,1,2)."
)
_RUNS = flags.DEFINE_string(
    "runs",
    None,
    "A run group, as JSON: run directory under --workdir -> that run's overrides (dotted "
    'config keys, "seed" among them), e.g. \'{"lr-0.001/seed_0": {"seed": 0, '
    '"train.learning_rate": 0.001}}\'.',
)
_PRINT_CONFIG = flags.DEFINE_bool(
    "print_config",
    False,
    "Print every field of the config (with the overrides): its value, type and one-line doc, "
    "then exit; nothing is built or written, and --workdir is not needed.",
)
_EVALUATE_FINISHED = flags.DEFINE_bool(
    "evaluate_finished",
    False,
    "Evaluate a run that already finished with this config again (by default it is left as it "
    "is and its final metrics printed).",
)
flags.mark_flags_as_required(["config"])
INTERRUPTED_EXIT_CODE = 128 + 2  # as a shell reports a process ended by SIGINT

# Exit status: 0 finished; 2 a user error or a checkpoint that could not be saved, e.g. on a full
# disk (one "main: error:" line, see commands.py; summary.json says "failed");
# DIVERGED_EXIT_CODE (3) a non-finite loss; STOPPED_EXIT_CODE (75) stopped by SIGTERM/SIGINT with
# a checkpoint saved, so rerunning resumes. Defined in run_dir, the trainer/sweep contract.


@one_line_errors("main")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO.
    if _PRINT_CONFIG.value:
        from transformer_jax.config.listing import listing

        print("\n".join(listing(_CONFIG.value.to_dict())))
        return
    if _WORKDIR.value is None:
        raise ValueError("--workdir is required (the run directory), e.g. --workdir=runs/copy")
    try:
        if _RUNS.value is not None:
            if _SEEDS.value is not None:
                raise ValueError("--runs and --seeds name a group twice; give one of them")
            configs, workdirs = _parse_runs(_RUNS.value, _CONFIG.value, _WORKDIR.value)
            _exit_with(train_run_group(configs, workdirs))
        if _SEEDS.value is not None:
            seeds = _parse_seeds(_SEEDS.value)
            _exit_with(train_seed_group(_CONFIG.value, _WORKDIR.value, seeds))
        summary = train_and_evaluate(
            _CONFIG.value, _WORKDIR.value, evaluate_finished=_EVALUATE_FINISHED.value
        )
    except NonFiniteError as error:
        print(f"Diverged: {error}", file=sys.stderr)
        sys.exit(DIVERGED_EXIT_CODE)
    except KeyboardInterrupt:
        # A second Ctrl-C (the first asks for a save and a clean stop: train/signals.py).
        print(
            "main: interrupted by a second Ctrl-C; the checkpoints already saved are intact: "
            "rerun to resume from the last one",
            file=sys.stderr,
        )
        sys.exit(INTERRUPTED_EXIT_CODE)
    _exit_with([summary])


def _parse_seeds(values: list[str]) -> list[int]:
    try:
        return [int(value) for value in values]
    except ValueError:
        raise ValueError(
            f"--seeds={','.join(values)} is invalid; expected comma-separated ints, e.g. 0,1,2"
        ) from None


def _parse_runs(text: str, config, workdir: str):
    """--runs: each run's config (`config` with its overrides) and its directory."""
    try:
        runs = json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as error:
        raise ValueError(f"--runs is not valid JSON ({error})") from None
    if (
        not isinstance(runs, dict)
        or not runs
        or not all(isinstance(v, dict) for v in runs.values())
    ):
        raise ValueError(
            "--runs must be a JSON object of run directory -> overrides, e.g. "
            '\'{"lr-0.001/seed_0": {"seed": 0, "train.learning_rate": 0.001}}\''
        )
    configs, workdirs = [], []
    for name, overrides in runs.items():
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise ValueError(f"--runs: {name!r} must be a directory inside --workdir")
        member = config.copy_and_resolve_references()
        for key, value in overrides.items():
            *sections, field = key.split(".")
            node = member
            try:
                for section in sections:
                    node = node[section]
                if field not in node:
                    raise KeyError(key)
                node[field] = value
            except (KeyError, TypeError) as error:
                raise ValueError(
                    f"--runs: {name}: {key}={value!r} is not a valid override of the config "
                    f"({type(error).__name__}: {error})"
                ) from None
        configs.append(member)
        workdirs.append(str(Path(workdir) / path))
    return configs, workdirs


def _refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object of --runs; a key given twice is refused (json keeps the last silently,
    dropping a member or an override)."""
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(
            f"--runs names {', '.join(map(repr, repeated))} twice; valid: each run directory "
            "once, and each override once per run"
        )
    return dict(pairs)


def _exit_with(summaries) -> None:
    """Prints the final metrics of the finished runs; exits with the status of the worst run (a
    seed group: diverged before stopped)."""
    for summary in summaries:
        if summary.status == "diverged":
            print(f"Diverged: {summary.error}", file=sys.stderr)
    for summary in summaries:
        if summary.status != "finished":
            continue
        for split, metrics in summary.metrics.items():
            shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items() if "/" not in k)
            print(f"{split}: {shown}")
    statuses = {summary.status for summary in summaries}
    if "diverged" in statuses:
        sys.exit(DIVERGED_EXIT_CODE)
    if "stopped" in statuses:
        sys.exit(STOPPED_EXIT_CODE)
    sys.exit(0)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("main"))
