"""Does rotary generalise to longer inputs on text? Train short, test long on characters.

Press et al. 2022 ("Train Short, Test Long", Figure 1) and Kazemnejad et al. 2023 (NoPE)
train a causal language model at one length and read it at longer ones: sinusoidal degrades
sharply past the training length, ALiBi stays flat, rotary degrades more slowly. Here the
character LM of configs/shakespeare_char.py (2 layers, d_model=64, 1,000 steps) trains on
windows of L = 64 characters and the length_extrapolation evaluator (train/length_eval.py)
reads consecutive test windows of 8 L = 512 characters: loss by position in buckets of 16 and
over the bands (0, L], (L, 2L], (2L, 4L], (4L, 8L]. Learned positions are left out: their
table has no rows past model.positional.max_len (the evaluator refuses them).

Each encoding trains at the learning rate and warmup experiments/charlm_positional.py chose for
it on validation loss at the same L (results/charlm_positional/selection.csv), not retuned here,
on seeds none of that sweep used.
Departures from Press et al.: characters of tiny shakespeare (1.1 M) for WikiText-103 words;
L = 64 for 512 and 1,024 tokens; 2 layers of d_model=64 for 16 layers of 1,024; 1,000 steps
of 32 x 64 characters; loss by position within one window of 8 L (their Figure 1: perplexity
of whole windows of each length, which the loss_window_{k}x metrics give).

Verdicts: each encoding against sinusoidal on the loss of every band, paired by seed, with
the 0.02-nat equivalence margin of the experiments/charlm_decided_*.py sweeps. The
sequential confirmation of those sweeps needs a tuning grid (confirm_seeds follow selection);
here nothing is tuned, so the seeds are a fixed 5.

Budget (2 CPU cores): a run ~45-90 s (experiments/charlm_attention_scale.py) plus one
evaluation of 64 windows of 512: 4 variants x 5 seeds = 20 runs, ~30 min.
"""

from transformer_jax.sweep import Sweep

# (learning rate, warmup) chosen per encoding by experiments/charlm_positional.py.
CHOSEN = {
    "sinusoidal": (2e-2, 100),
    "rotary": (6e-3, 100),
    "alibi": (2e-2, 100),
    "none": (6e-3, 100),
}
BLOCK = "train.evaluators.length_extrapolation"
COMMON = {
    f"{BLOCK}.enabled": True,
    f"{BLOCK}.factor": 8,
    f"{BLOCK}.windows": 64,  # 32,768 test characters of the split's ~55,800
    f"{BLOCK}.bucket": 16,
    f"{BLOCK}.splits": ("test",),
    f"{BLOCK}.every": 1000,  # at the end only
    "model.positional.max_len": 64,  # the training length: nothing sized past it in training
}
BANDS = tuple(f"test/loss_band_{k}x" for k in (1, 2, 4, 8))
WINDOWS = tuple(f"test/loss_window_{k}x" for k in (1, 2, 4, 8))


def get_sweep():
    return Sweep(
        config="configs/shakespeare_char.py",
        variants={
            kind: {
                **COMMON,
                "model.positional.kind": kind,
                "train.learning_rate": lr,
                "train.warmup_steps": warmup,
            }
            for kind, (lr, warmup) in CHOSEN.items()
        },
        seeds=(20, 21, 22, 23, 24),
        metrics=("test/loss", *BANDS, *WINDOWS),
        baseline="sinusoidal",
        equivalence_margins={metric: 0.02 for metric in ("test/loss", *BANDS)},
    )
