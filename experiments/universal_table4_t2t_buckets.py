"""Table 4 under tensor2tensor's recipe, second pass: its length buckets and its halting unit,
at the fitted warmup

experiments/universal_table4_t2t.py copies tensor2tensor's recipe but for two things it did not
list, which this sweep removes (lines at tensorflow/tensor2tensor commit bafdc1b6):
- offsets per length bucket: tensor2tensor draws one position offset per batch in [0, batch
  length) (models/research/universal_transformer_util.py:1413-1418), and batches by length
  bucket (utils/data_reader.py:438-451; boundaries 8, 9, ..., 236 from :71-79 with
  common_hparams.py's min_length_bucket=8, length_bucket_step=1.1), each batch padded to its
  own longest example, so a short example's offset stays below about its own length, in
  training and at evaluation. Batches padded to the split's longest (400 tokens on test_long)
  let a length-3 example start anywhere in [0, 400), at positions never trained. Here
  data.bucket_by_length="t2t" for training and for every evaluation split, and the offset is
  drawn below the batch's longest real row (layers/positional.py, batch_offset_bound), the
  length tensor2tensor pads it to; our batches are padded a little further, to the power of two
  at or above it (capped at the split's length), so that a handful of shapes compile;
- the halting unit's input: tensor2tensor's ACT reads p = dense(step_preprocess(state)), the
  state after the step's position and step signals, before the block
  (universal_transformer_util.py:1093-1108): model.universal.halting_input="step_input".
Beside them it keeps experiments/universal_table4_t2t_warmup.py's fitted warmup (1,000 steps,
the same 2.0e-3 peak; a departure from models/transformer.py:1851) and every departure
universal_table4_t2t.py lists, but one: batches hold 64 sequences at every length, where
tensor2tensor's hold 4,096 tokens (batch_size // bucket length sequences,
utils/data_reader.py:113-114), so its short buckets carry more sequences per step. The UT without
ACT is left out (the budget; its rows under the earlier passes are committed): the Transformer
and UT+ACT, 3 seeds, on copy (this file) and reverse (universal_table4_t2t_buckets_reverse.py).

Readings: at plain positions (the runs' own evaluation, summary.json), and at tensor2tensor's
random offsets, per bucketed batch, with reread_positions (the run's config buckets the
evaluation batches too). experiments/reports/table4.py reports both.

Budget: measured on the 2-core machine (AMD EPYC, shared, load average 5-10 during the
measurement), UT+ACT on copy, `taskset -c 0 python -m transformer_jax.main
--config=configs/universal_table4.py:copy` with this sweep's ut_act overrides and
--config.train.steps=100 --config.train.eval_every=100, another run on the other core: 747 s
in all, of which ~460 s start-up and compiling the bucketed training shapes (a few padded widths
per side), 1.8 s a step (steps 50-100, where the unbucketed sweep measured 0.52 s at a lighter
load), 99 s for the evaluation of test and test_long (its shapes compiled included); the reread
at random offsets (reread_positions, test and test_long) 102 s. Compiling is paid once per
variant and task: the sweep's persistent compilation cache serves the other seeds. Three seeds
of one task at 3,000 steps with evaluations every 1,000: UT+ACT ~3 x 3,000 x 0.52 s + 8 min +
9 evaluations, ~1.7 run-hours at the lighter load's step time (~5 at this measurement's). The
Transformer, the same way but at load average 1-3: 163 s in all, ~60 s before its first steps,
0.43 s a step (steps 50-100), 55 s for the evaluation: ~1.2 run-hours for three seeds. The
rereads ~0.1. Copy and reverse: ~6 run-hours, ~3 hours at --parallel=2 on a quiet machine; up
to about 3x more on one as loaded as the UT+ACT measurement's. The commands:

  python -m transformer_jax.sweep --sweep=experiments/universal_table4_t2t_buckets.py \
      --workdir=results/universal_table4_t2t_buckets/copy --parallel=2 --seed_groups=false
  python -m transformer_jax.sweep --sweep=experiments/universal_table4_t2t_buckets_reverse.py \
      --workdir=results/universal_table4_t2t_buckets/reverse --parallel=2 --seed_groups=false
  for run in results/universal_table4_t2t_buckets/*/ut_act/seed_*; do
      python -m transformer_jax.analysis.reread_positions --workdir=$run \
          --eval_positions=step_offset --splits=test,test_long
  done
  python -m experiments.reports.table4 --results=results/universal_table4_t2t_buckets
"""

import dataclasses
import runpy
from pathlib import Path

BUCKETS = {"data.bucket_by_length": "t2t"}
HALTING = {"model.universal.halting_input": "step_input"}


def make_sweep(task: str):
    """Transformer and UT+ACT on one task of configs/universal_table4.py, bucketed."""
    here = Path(__file__).parent
    t2t = runpy.run_path(str(here / "universal_table4_t2t.py"))
    fitted = runpy.run_path(str(here / "universal_table4_t2t_warmup.py"))["fitted_warmup"]
    base = t2t["make_sweep"](task)
    common = {**fitted(t2t["RECIPE"]), **BUCKETS}
    variants = {
        "transformer": {**base.variants["transformer"], **common},
        "ut_act": {**base.variants["ut_act"], **common, **HALTING},
    }
    return dataclasses.replace(base, variants=variants, description="")


def get_sweep():
    return make_sweep("copy")
