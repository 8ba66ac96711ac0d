"""Which positional encodings let a decoder-only Transformer reverse sequences longer than any
it was trained on? Trained on 1-16 symbols, tested on 8, 16, 24, 32, 48 and 64.

configs/length_generalization.py: reverse in the prompt layout ("x = reverse(x)", the loss and
accuracies on the answer only), a 2-layer decoder-only model, d_model=64. What each encoding
predicts (see its docstring in transformer_jax/layers/positional.py):
- sinusoidal: defined at every position, but positions past 16 + 1 + 17 were never seen:
  accuracy should drop right after the training length (Press et al. 2022: within ~20 tokens);
- learned: rows past the training positions keep their random initialisation: a cliff at 16;
- rotary: only relative distances matter, but longer ones are new: a slower decline;
- alibi: the claim (stable perplexity at 2-6x the training length) is for language modelling,
  where recent tokens matter most; reverse reads the farthest input first, so its recency bias
  predicts failure at length;
- none: a causal decoder can still count positions through its mask (NoPE, Kazemnejad et al.
  2023); no position is new, but counting gets less precise as length grows;
- randomized (sinusoidal positions drawn as an ordered random subset of 0..max_len-1 in
  training, Ruoss et al. 2023): every test position and larger gaps are trained: the best
  length generalisation of the six, the paper's claim. Evaluated on plain positions 0, 1, 2,
  ..., it meets consecutive positions it never trained on;
- randomized_eval: random positions at test too, as the paper's code evaluates (it draws the
  ordered subset at evaluation too, experiments/range_evaluation.py calls the model with an rng)
  over a range four times the longest test prompt (L = 512 for 130 tokens; the paper: 2,048 for
  500), so that test lengths, too, see gaps of the kind training did.
Accuracy against test length, one line per encoding, is the report's length_*.png.

Departures from the papers, and why (sources in docs/papers.md): Ruoss et al.'s code draws one
sorted subset per batch, shared by its sequences, and a fresh one for every evaluation batch;
here (train_positions="randomized") every sequence draws its own, and the committed
`randomized_eval` runs read a fixed key per stack, so every evaluation batch of a shape saw the
same positions (train_positions="batch_randomized" and a fresh key per evaluation batch are the
code's way). `randomized` and `randomized_eval` also differ in max_len (130 and 512), so their
gap mixes the range of training positions with the positions read at test. Ruoss et al. train on
lengths up to 40 and test up to 500 with 5-layer models and randomize over L = 2,048 positions;
here L = max_len, the longest test prompt (130 tokens) for `randomized` and 512 for
`randomized_eval`, and the model is small enough for this machine. Press et al. measure
perplexity on text; reverse is a stricter test of the same question.

Budget: measured on a 2-core CPU under load, the model trains at ~18 steps/s; runs stop at the
test-accuracy plateau (3 evaluations 500 steps apart without a gain of 0.001, not before step
2,000) or at 8,000 steps (~450 s + 16 evaluations of six 500-example splits, ~80 s). 6 encodings
x 3 seeds x ~530 s = 9,500 run-seconds = 1.3 hours at --parallel=2; a rerun of the sweep resumes
it.
"""

from pathlib import Path

from transformer_jax import defaults
from transformer_jax.sweep import Sweep

CONFIG = "configs/length_generalization.py"

ENCODINGS = {
    "sinusoidal": {},
    "learned": {"model.positional.kind": "learned"},
    "rotary": {"model.positional.kind": "rotary"},
    "alibi": {"model.positional.kind": "alibi"},
    "none": {"model.positional.kind": "none"},
    "randomized": {"model.positional.train_positions": "randomized"},
    "randomized_eval": {
        "model.positional.train_positions": "randomized",
        "model.positional.eval_positions": "randomized",
        "model.positional.max_len": 512,
    },
}


def get_sweep():
    config = defaults.from_file(Path(__file__).parents[1] / CONFIG)
    lengths = [f"test_len{n}" for n in config.data.test_lengths]
    return Sweep(
        config=CONFIG,
        variants=ENCODINGS,
        seeds=(0, 1, 2),
        metrics=(
            "test/seq_accuracy",
            *(f"{split}/seq_accuracy" for split in lengths),
            *(f"{split}/token_accuracy" for split in lengths),
        ),
        baseline="sinusoidal",
    )
