"""A trained run's evaluation again, at other positions: the same examples, the same metrics,
with `model.positional.eval_positions` replaced.

  python -m transformer_jax.analysis.reread_positions \
      --workdir=results/universal_table4_t2t/copy/ut/seed_0 --eval_positions=step_offset

tensor2tensor draws its random position offset at evaluation as in training (its op in
add_position_timing_signal has no mode check), so its Table 4 figures for the UTs trained with
offsets are read at random offsets, while training here evaluates at plain positions 0, 1, 2,
...; this command gives the other reading. The draws are a fresh key per batch, a function of
the run's seed and the batch (`train.step.eval_positions_key`), so rerunning the command gives
the same figures; --draw_seed replaces the run's key to see how much they move between draws.

Writes WORKDIR/eval_positions/<eval_positions>[_draw<k>].json: {"eval_positions", "step",
"draw_seed", "metrics": {split: {metric: value}}}, which experiments/reports/table4.py reads.
A reread of other splits adds them to the reading already there of the same checkpoint step
(the file keeps every split read so far); one of another step replaces it.
"""

import json
from pathlib import Path

import jax
from absl import app, flags

from transformer_jax import run_dir
from transformer_jax.analysis.flags import define_common_flags
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.layers.positional import EVAL_POSITIONS
from transformer_jax.models import build_model
from transformer_jax.train import step as steps
from transformer_jax.train.evaluators import sum_over_batches
from transformer_jax.train.restore import load_run

OUT_DIR = "eval_positions"


def out_path(workdir, eval_positions: str, draw_seed: int | None) -> Path:
    """Where the reading of `eval_positions` (and `draw_seed`, if any) is written."""
    suffix = "" if draw_seed is None else f"_draw{draw_seed}"
    return Path(workdir) / OUT_DIR / f"{eval_positions}{suffix}.json"


def reread(run, eval_positions: str, *, splits=None, draw_seed: int | None = None) -> dict:
    """split -> metric -> value of `run` (a train.restore.LoadedRun) evaluated on its own
    evaluation examples (train.eval_examples of each split) at `eval_positions`."""
    model_config = run.model_config.override({"positional.eval_positions": eval_positions})
    model = build_model(model_config)
    state = run.state
    if draw_seed is not None:
        state = state.replace(rng=jax.random.PRNGKey(draw_seed))
    info = run.dataset.info
    splits = list(splits or info.eval_splits)
    unknown = sorted(set(splits) - set(info.eval_splits))
    if unknown:
        raise ValueError(f"--splits={unknown} are not evaluated; valid: {list(info.eval_splits)}")
    eval_fn = jax.jit(lambda s, b: steps.eval_step(s, b, model=model, diagnostics=False))
    return {
        split: sum_over_batches(
            eval_fn,
            state,
            run.dataset.eval_batches(
                split,
                batch_size=run.config.data.batch_size,
                max_examples=run.config.train.eval_examples or None,
            ),
        )
        for split in splits
    }


def _define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    define_common_flags("workdir", "step", required=("workdir",), flag_values=flag_values)
    flags.DEFINE_enum(
        "eval_positions",
        "step_offset",
        EVAL_POSITIONS,
        "Positions to read the run at (model.positional.eval_positions).",
        flag_values=flag_values,
    )
    flags.DEFINE_list("splits", None, "Splits to evaluate; default all.", flag_values=flag_values)
    flags.DEFINE_integer(
        "draw_seed", None, "Draw from this seed instead of the run's key.", flag_values=flag_values
    )


@one_line_errors("reread_positions")
def main(argv):
    del argv
    fv = flags.FLAGS
    run = load_run(fv.workdir, fv.step)
    metrics = reread(run, fv.eval_positions, splits=fv.splits, draw_seed=fv.draw_seed)
    out = out_path(fv.workdir, fv.eval_positions, fv.draw_seed)
    record = {
        "eval_positions": fv.eval_positions,
        "step": int(run.state.step),
        "draw_seed": fv.draw_seed,
        "metrics": metrics,
    }
    print(json.dumps(save_reading(out, record), indent=2))
    print(f"wrote {out}")


def save_reading(out: Path, record: dict) -> dict:
    """Writes `record` to `out` atomically, keeping the splits of the reading already there when
    it is of the same checkpoint step (rereading one split never drops another); returns what
    was written."""
    before = run_dir.read_json(out)
    if before is not None and before.get("step") == record["step"]:
        record = {**record, "metrics": {**before["metrics"], **record["metrics"]}}
    out.parent.mkdir(exist_ok=True)
    run_dir.write_json(out, record)
    return record


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=parse_flags("reread_positions"))
