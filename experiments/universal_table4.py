"""Universal Transformer vs Transformer on the paper's algorithmic tasks, under its protocol:
trained on lengths 1-40, tested on 1-400 (Dehghani et al. 2019, Table 4).

`make_sweep(task)` runs the comparison on copy (this file), reverse
(universal_table4_reverse.py) or addition (universal_table4_addition.py); its description
becomes each report's claim. Paper, Table 4 (char / sequence accuracy at length 400),
Transformer vs UT: copy 0.53/0.03 vs 0.91/0.35, reverse 0.13/0.06 vs 0.96/0.46, addition
0.07/0.00 vs 0.34/0.02. Variants: the Transformer and the UT, each with and without random
position offsets, and UT+ACT with offsets; three seeds each. The budget (below) covers copy and
reverse; addition runs the same way if a later budget allows.

Where this follows tensor2tensor (data_generators/algorithmic.py,
models/research/universal_transformer*.py; file, line and commit in docs/papers.md):
- data: its algorithmic_{identity,reverse,addition}_decimal40 generators (data.variant="t2t"):
  decimal symbols, 100,000 training examples with lengths uniform in 1-40, a dev split with
  lengths uniform in 1-400 (our test_long, on which Table 4 is reported), addition with both
  operands least significant digit first around a separator and the sum least significant first;
- metrics: teacher-forced per-token accuracy (its "accuracy", the paper's char accuracy) and
  per-sequence exact match (its "accuracy_per_sequence"), our token_accuracy / seq_accuracy;
- offsets: position_start_index="random" (the *_position_random_timing_tiny hparams) as
  model.positional.train_positions="batch_offset": one offset per batch, uniform in [0, T) for
  a batch T tokens long, added to sinusoidal positions at every UT step;
- architecture: 4 heads, 2 encoder + 2 decoder layers for the Transformer (transformer_tiny);
  ACT with threshold 1 - 0.01 and ponder cost 0.01; t2t's act_max_steps for the tiny sets is
  2 x num_hidden_layers = 4, the recurrent step count used here for both UTs.

Where it does not, and why:
- blocks: post-norm (the paper's Transformer, Vaswani §3.1), where tensor2tensor's
  transformer_tiny inherits transformer_base_v2's pre-norm (layer_preprocess_sequence="n",
  layer_postprocess_sequence="da") and the UT encoder and decoder end with a final norm
  (layer_preprocess);
- step signal: sinusoidal (the paper's §2.1), where tensor2tensor's default is a learned
  embedding per step (step_timing_signal_type="learned"; only
  universal_transformer_step_sinusoid_timing_tiny uses sinusoids);
- training recipe: no label smoothing (tensor2tensor: 0.1), Adam beta2 0.98 (0.997), no
  attention or ReLU dropout (0.1 each), 1,000 warmup steps (8,000) with the rsqrt schedule;
  residual dropout 0.1 as there; the global gradient norm clipped at 1.0, where tensor2tensor
  does not clip (clip_grad_norm = 0, models/transformer.py:1779); the rate's constant 1.0
  where tensor2tensor's is 2.0 (learning_rate_constant, :1970), so with our 1,000 warmup steps
  the peak is 2.8e-3 at d_model=128 and 4.0e-3 at 64, against tensor2tensor's 2.0e-3 at 128
  after 8,000 (experiments/universal_table4_t2t.py takes its values);
- length buckets: tensor2tensor batches by length bucket, each batch padded to its longest
  (utils/data_reader.py:438-451), so its one offset per batch stays below about an example's
  own length; ours pads every batch to its split's longest (40 in training, 400 on test_long),
  and the offsets follow that length (experiments/universal_table4_t2t_buckets.py buckets);
- ACT's halting unit reads the block's output h_t, where tensor2tensor's reads the step's input,
  dense(step_preprocess(state)) (universal_transformer_util.py:1093-1108;
  model.universal.halting_input="step_input");
- size: transformer_tiny is d_model=128, d_ff=512 and the UT 8 recurrent steps
  (universal_transformer_tiny). Measured on a 2-core CPU under load (batch 64): the Transformer
  at that size ran 0.75 steps/s and the 8-step UT 0.28 steps/s, so three seeds of five variants
  on two tasks would need ~27 hours for 2,000 UT steps. At d_model=64, d_ff=256 and 4 UT steps
  the Transformer runs 5.5 steps/s and the UT 2.2; that is the largest size that fits
  (configs/universal_table4.py holds the reference size; the variants set this one);
- offsets: tensor2tensor draws a new offset at every recurrent step of the UT (its random op
  runs inside the step); ours holds one per batch for all steps. Tried first, per sequence over
  the whole table (train_positions="offset", uniform in [0, 401 - length], so that every test
  position is seen in training): the Transformer then did not learn copy at lengths 1-40 within
  the budget (test token accuracy 0.33, 0.34 and 0.51 for seeds 0-2, still rising slowly at
  1,500-2,500 steps, against 1.00 by step 2,000 with plain positions), so a model that must
  read every absolute position from 0 to 400 with 100,000 examples is a different, much harder
  task than the paper's; Table 4 uses the reference code's offsets;
- training: tensor2tensor trains a fixed number of steps (train_steps; the paper does not state
  it, and t2t-trainer's default is 250,000, utils/flags.py:53; batches of 4,096 tokens,
  models/transformer.py:1777); we train until validation token accuracy (test, lengths 1-40) has
  not improved by 0.001 in 2 evaluations 500 steps apart, not before step 1,000, at most the cap
  below, with the rsqrt schedule (warmup 1,000 steps) whatever the step count. summary.json's
  early_stop says, per run, whether it reached that plateau or the cap. The UTs with offsets are
  the exception: they train the whole cap. Under the rule, their first runs (seed 0, now in
  results/universal_table4/stopped_early/runs.jsonl) stopped at 5,000 (UT) and 4,000 steps (UT+ACT)
  while their training token accuracy was still climbing steadily (UT: 0.19, 0.25, 0.30, 0.33,
  0.37, 0.38, 0.39, 0.43, 0.46, 0.48 at 500, 1,000, ..., 5,000 steps), because their validation
  accuracy swung between evaluations (0.48, 0.32, 0.61, 0.57, 0.40 from step 3,000 on): it is
  read at plain positions, one (encoder, decoder) offset pair of the many the model trains on;
- evaluation positions: tensor2tensor draws its random offset at evaluation too (the op in
  add_position_timing_signal does not look at the mode), so its Table 4 numbers for models
  trained with offsets were presumably read at random offsets; ours are read at plain positions
  0, 1, 2, ..., the same for every variant;
- ACT: halting bias initialised to -1 (ours) rather than +1, which makes most positions halt
  after about two steps at initialisation (docs/papers.md); halted positions are frozen (the
  paper) rather than transformed further (tensor2tensor, `act_halted="transform"`);
- tokens: tensor2tensor appends EOS to the inputs as well as the targets; ours has EOS after the
  targets only. Its vocabulary reserves 2 ids (PAD, EOS), ours 3 (PAD, BOS, EOS);
- evaluation: 500 of the 1,000 generated test_long examples (of t2t's 10,000) per evaluation.

Budget: measured at the chosen size (2 cores, --parallel=2), the Transformer trains at ~5.5
steps/s and the UT at ~2.2 steps/s, and an evaluation (test 500 + test_long 500 examples up to
400 long) costs ~30-40 s. The first check: one Transformer seed reaches
test sequence accuracy 1.00 on copy by step 2,000 (`--variants=transformer --seeds=0`). A first
cap of 2,500 steps (4.4 hours for copy and reverse) was too short for every variant with random
offsets: the Transformer with them was at test token accuracy 0.45 and 0.71 (seeds 0 and 1)
after 2,500 steps and still rising (offsets make the encoder's and the decoder's positions
disagree by a random shift, so copying by position match no longer works). The cap is now 10,000
steps for all variants (early stopping ends a run whose validation token accuracy has stopped
rising, which ends the plain Transformer at 2,500); under load that was about 40
minutes per Transformer-with-offsets run and 80-90 per UT-with-offsets run, ~6 hours per task at
--parallel=2 (a rerun of the sweep resumes it). The three plain
Transformer runs of copy were trained under the first cap and stopped at it, at test token
accuracy 0.9997, 0.9995 and 1.0000. On an idle 2-core AMD EPYC machine (Zen 5; 2048 x 2048
float32 matmul 0.44 TFLOP/s) at --parallel=2 the wall times were: plain UT 8m45s (early stop at
2,500 steps), UT with offsets 47m (the whole 10,000-step cap), UT+ACT with offsets 48m; a task's
15 runs take about 3.5 hours there. Reverse learns more slowly on the same machine (one run per
core): the plain Transformer stops at 2,500-4,500 steps (6-13 minutes), with offsets at
7,500-9,500 (15-24), the plain UT at 4,000-6,000 (14-24), and the UTs with offsets took 41-44
minutes for the 10,000 steps (62-64 for seed 0, partly under load); each run's
summary.json holds its wall_time_s (`python -m transformer_jax.sweep
--sweep=experiments/universal_table4_reverse.py --workdir=results/universal_table4/reverse
--parallel=2 --seed_groups=false`, by variant and seed).
"""

from transformer_jax.sweep import Sweep

# The largest size that fits the budget (see the docstring); every variant trains at most
# configs/universal_table4.py's train.steps, the same cap for all.
TRANSFORMER = {"model.d_model": 64, "model.ffn.d_ff": 256}
UT = {**TRANSFORMER, "model.universal.enabled": True, "model.universal.steps": 4}
OFFSET = {"model.positional.train_positions": "batch_offset"}
# The UT with offsets trains the whole cap, without early stopping: its validation accuracy
# (plain positions, one offset pair of the many it trains on) swung by up to 0.2 between
# evaluations while its training accuracy climbed steadily, and the plateau rule stopped both
# first runs mid-climb (kept in results/universal_table4/stopped_early/; see the docstring).
WHOLE_CAP = {"train.early_stop_metric": ""}
ACCURACIES = ("token_accuracy", "seq_accuracy")  # the paper's character / sequence accuracy


def make_sweep(task: str) -> Sweep:
    """Table 4's comparison on one task of configs/universal_table4.py."""
    title = f"Universal Transformer vs Transformer on {task} at length 400 (Table 4 data, lengths)"
    details = __doc__.split("\n\n", 1)[1].rstrip()  # the docstring less its first paragraph
    return Sweep(
        description=f"{title}\n\n{details}",
        config="configs/universal_table4.py",
        config_arg=task,
        variants={
            "transformer": TRANSFORMER,
            "transformer_offset": {**TRANSFORMER, **OFFSET},
            "ut": UT,
            "ut_offset": {**UT, **OFFSET, **WHOLE_CAP},
            "ut_act_offset": {**UT, **OFFSET, **WHOLE_CAP, "model.universal.act": True},
        },
        seeds=(0, 1, 2),
        # Table 4's character and sequence accuracy at length 400 first, then at 1-40.
        metrics=(
            *(f"{split}/{name}" for split in ("test_long", "test") for name in ACCURACIES),
            *(f"test_long/ponder_mean/{stack}" for stack in ("encoder", "decoder")),
        ),
        baseline="transformer",
    )


def get_sweep():
    return make_sweep("copy")
