"""Randomized positions as Ruoss et al. (2023) ran them, beside the project's per-sequence draw,
all at one range of positions: which of the three changes, the sampling, the reading at test or
the range, makes `randomized` generalise?

The task, model and lengths are experiments/length_generalization.py's (reverse in the prompt
layout, a 2-layer decoder, trained on 1-16 symbols, tested on 8-64). There, `randomized` (max_len
130, read at plain positions) and `randomized_eval` (max_len 512, read at random positions)
differ in two things at once. Here every variant draws from the same L = 512 positions, and
the variants cross two switches:
- sampling: `batch_randomized`, the reference's (google-deepmind/randomized_positional_encodings,
  models/positional_encodings.py:218-224, noisy_fixed_positional_encodings: one
  `jrandom.choice(..., shape=(sequence_length,), replace=False)` per call, then `jnp.sort`,
  shared by every sequence of the batch), or `randomized`, one subset per sequence for its real
  length (the project's, and the meaning `train_positions="randomized"` keeps, so the committed
  runs' config.json files read back unchanged);
- reading at test: plain positions 0, 1, 2, ..., or random ones drawn as in training, a fresh
  draw per evaluation batch (experiments/range_evaluation.py:68 and :86-101 there:
  `next(rng_seq)` for every batch; here `train.step.eval_positions_key`, a function of the
  run's seed and the batch, so a rerun reads the same positions).
Their training batches hold one length each: their curriculum draws one length per step,
uniform over 1..L_train (experiments/training.py:258-261, curriculum.py:68-71), so a batch's
one sorted subset is every sequence's own and spreads over [0, L). Here the same:
data.bucket_by_length="each" (one length per batch, uniform over the training lengths as the
training set is, each batch padded to the power of two at or above it) and `batch_randomized`
draws its subset for the batch's real length. With their settings beside it:
- dropout 0.1 on the embeddings and the residual branches (models/transformer.py:47, :324-325,
  :417-431; experiments/example.py:71);
- batches of 128 sequences (experiments/example.py:27-30);
- 8 heads (models/transformer.py:41), of 8 dimensions at their and our width 64;
- Adam at a constant 1e-3 without warmup, optax's beta2 0.999 and epsilon 1e-8 (optax.adam,
  experiments/training.py:223, example.py:123), after clipping the global gradient norm at
  1.0 (training.py:63 and :229-231, as here).
So `batch_eval` is the reference's protocol but for these departures, each for the budget or the
task: L = 512 rather than 2,048 (the longest prompt is 130 tokens), trained on 1-16 symbols
rather than up to 40, 2 layers rather than 5, reverse in a decoder-only prompt layout rather
than their encoder-only tasks, and early stopping as in length_generalization.py instead of
their 10,000 steps (example.py:117). The first pass of this sweep (results/
length_generalization_ruoss, before these settings) mixed the training lengths in a batch padded
to 34 tokens, so a short row read the first few of a 34-position subset, bunched at the low end;
its `batch` variants were not the reference's, and its runs' config.json files record its
settings (dropout 0, batch 64, 4 heads, beta2 0.98, epsilon 1e-9, 200 warmup steps).

Budget: measured on the 2-core machine (AMD EPYC, shared, load average 5-8), `taskset -c 1
python -m transformer_jax.main --config=configs/length_generalization.py` with batch_eval's
overrides and --config.train.steps=200, another run on the other core: start-up and compiling
~220 s, a step 0.24-0.37 s (batches of 128), the first evaluation (compiling its shapes) 190 s,
later ones ~8 s. A run to the 8,000-step cap: ~220 + 8,000 x 0.3 + 16 x 8 + 190 = ~2,900 s, ~0.8
run-hours (the first pass's runs stopped at 4,000-8,000 steps). All 4 variants x 3 seeds: ~9
run-hours; batch_eval and sequence_eval alone (`--variants=batch_eval,sequence_eval`), with the
plain reading of their checkpoints by reread_positions (--eval_positions=plain, a few minutes
each), ~5 run-hours. Each run trains alone (--seed_groups=false): one length per batch gives the
seeds' batches of a step different widths, which a seed group cannot stack. Measured at
--parallel=1 beside other jobs on the 2 cores: 694-986 s a run (8,000 steps at most), the two
variants' 6 runs 1.3 run-hours, a plain reread ~30 s. The command:

  python -m transformer_jax.sweep --sweep=experiments/length_generalization_ruoss.py \\
      --workdir=results/length_generalization_ruoss_batches --parallel=2 \\
      --variants=batch_eval,sequence_eval --seed_groups=false
  for run in results/length_generalization_ruoss_batches/*_eval/seed_*; do
      python -m transformer_jax.analysis.reread_positions --workdir=$run --eval_positions=plain
  done
"""

import dataclasses
import runpy
from pathlib import Path

MAX_LEN = 512  # one range for every variant: four times the longest test prompt (130 tokens)
# Ruoss et al.'s batches and training settings, for every variant (the docstring's list).
REFERENCE = {
    "data.bucket_by_length": "each",
    "data.batch_size": 128,
    "model.dropout_rate": 0.1,
    "model.attention.num_heads": 8,
    "train.b2": 0.999,
    "train.eps": 1e-8,
    "train.grad_clip_norm": 1.0,
    "train.warmup_steps": 0,
}


def _variant(train_positions: str, read_random: bool) -> dict:
    return {
        **REFERENCE,
        "model.positional.train_positions": train_positions,
        "model.positional.eval_positions": train_positions if read_random else "plain",
        "model.positional.max_len": MAX_LEN,
    }


VARIANTS = {
    "batch": _variant("batch_randomized", read_random=False),
    "batch_eval": _variant("batch_randomized", read_random=True),
    "sequence": _variant("randomized", read_random=False),
    "sequence_eval": _variant("randomized", read_random=True),
}


def get_sweep():
    base = runpy.run_path(str(Path(__file__).with_name("length_generalization.py")))["get_sweep"]()
    return dataclasses.replace(base, variants=VARIANTS, baseline="batch_eval", description="")
