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
`batch_eval` is the reference's protocol. Remaining departures from it: L = 512 rather than
2,048, trained on 1-16 symbols rather than up to 40, 2 layers rather than 5, reverse in a
decoder-only prompt layout rather than their encoder-only tasks, and early stopping as in
length_generalization.py.

Budget: the runs of length_generalization.py took ~530 s each under load on 2 cores (early
stopping at 2,000-8,000 steps); 4 variants x 3 seeds x ~530 s = ~1.8 run-hours, ~0.9 hours at
--parallel=2:

  python -m transformer_jax.sweep --sweep=experiments/length_generalization_ruoss.py \\
      --workdir=results/length_generalization_ruoss --parallel=2
"""

import dataclasses
import runpy
from pathlib import Path

MAX_LEN = 512  # one range for every variant: four times the longest test prompt (130 tokens)


def _variant(train_positions: str, read_random: bool) -> dict:
    return {
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
