"""Table 4 under tensor2tensor's recipe: the Transformer, the UT and UT+ACT trained as
`transformer_tiny`, `universal_transformer_position_random_timing_tiny` and
`adaptive_universal_transformer_position_random_timing_tiny` set them, read at plain positions
and at tensor2tensor's random offsets.

`make_sweep(task)` runs copy (this file) or reverse (universal_table4_t2t_reverse.py) on the data
of configs/universal_table4.py (tensor2tensor's algorithmic_*_decimal40: train 1-40, test_long
1-400). experiments/universal_table4.py is the project's own protocol, run first; this sweep
changes its training recipe to the reference code's, so that a difference between the two
tells the method from the protocol. Lines are at tensorflow/tensor2tensor commit bafdc1b6
(docs/papers.md lists the same sources):

What it takes from tensor2tensor:
- blocks: pre-norm, x + Dropout(F(Norm(x))), with a final norm after each stack
  (models/transformer.py:1846-1847, transformer_base_v2's layer_preprocess_sequence="n",
  layer_postprocess_sequence="da"; models/research/universal_transformer_util.py:129 and :192,
  the UT encoder and decoder end with layer_preprocess): model.norm.position="pre";
- size: hidden 128, filter 512, 4 heads, 2 layers (models/transformer.py:2240-2246,
  transformer_tiny); the UT 8 recurrent steps (models/research/universal_transformer.py:491-495);
  UT+ACT at most act_max_steps = 2 x num_hidden_layers = 4 steps, set while num_hidden_layers is
  transformer_tiny's 2 (universal_transformer.py:436, before :494 sets num_rec_steps = 8);
- step signal: a learned embedding per step (universal_transformer.py:397,
  step_timing_signal_type="learned"; layers/common_attention.py:500-520, initialised N(0, 1/D)
  and scaled by sqrt(D)): model.universal.step_signal="learned";
- positions: position_start_index="random" (universal_transformer.py:710-713, :731-735): one
  offset per batch, uniform in [0, batch length), drawn anew inside every recurrent step
  (universal_transformer_util.py:1413-1418 in add_position_timing_signal, called by
  step_preprocess at :1379-1380 from every step, :585 and :1093) and at evaluation too (no mode
  check): model.positional.train_positions="step_offset"; max_len 801 so that every offset of
  a 401-token test_long batch fits. The Transformer has none: transformer.py adds the plain
  timing signal (hparams.pos="timing", :1814);
- dropout 0.1 on residual branches, attention weights and ReLU units (transformer.py:1848-1850);
- optimizer: Adam beta1 0.9, beta2 0.997, epsilon 1e-9 (transformer.py:1789, :1965, :1780), no
  gradient clipping (:1779), label smoothing 0.1 (:1792); learning rate
  2.0 * min(1, step / 8,000) * rsqrt(max(step, 8,000)) * hidden^-0.5
  (constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size, :1967-1970 and :1851; utils/
  learning_rate.py:26-79), which is train.schedule="rsqrt" with learning_rate 2.0;
- ACT: halting bias initialised to +1.0, epsilon 0.01, ponder cost 0.01
  (universal_transformer.py:437-439); halted positions keep being transformed
  (universal_transformer_util.py:1153-1158: transformed_state is the next step's state):
  model.universal.act_halted="transform";
- a fixed step budget, no early stopping (tensor2tensor trains train_steps).

Where it still departs, each with the line it departs from:
- steps and batch: TRAIN_STEPS below, batch 64 sequences (about 1,400 tokens), against
  batches of 4,096 tokens (transformer.py:1777) for tensor2tensor's train_steps (the paper does
  not state them; t2t-trainer's default is 250,000). With 8,000 warmup steps as there, a run
  shorter than that never reaches the peak rate: the budget (below) sets how far it gets;
- position signal: sin and cos interleaved, 10000^(-2i/D) (Vaswani §3.5), where
  get_timing_signal_1d (layers/common_attention.py:408-456) concatenates all sines then all
  cosines with timescales 10000^(-i/(D/2 - 1)): the same family of signals, slightly different
  frequencies;
- ACT: a position still running at the last step halts there with the remainder as its weight
  (Graves 2016) and the output is the weighted sum of the states, where tensor2tensor stops at
  act_max_steps without a remainder (universal_transformer_util.py:1176-1188) and mixes states as
  new = w h + (1 - w) previous (:1159-1160); the ponder cost averages over real positions, where
  tensor2tensor's tf.reduce_mean (universal_transformer.py:212-221) includes padding;
- batches: padded to the split's longest (40 in training, 400 on test_long), where tensor2tensor
  batches by length bucket, each padded to its longest example (utils/data_reader.py:438-451),
  so its one offset per batch stays below about an example's own length; here a short
  test_long example's offset reaches 400, positions its training never saw;
- ACT's halting unit reads the block's output, where tensor2tensor's reads the step's input,
  dense(step_preprocess(state)) (universal_transformer_util.py:1093-1108). These two are removed
  in experiments/universal_table4_t2t_buckets.py (data.bucket_by_length="t2t",
  model.universal.halting_input="step_input");
- initialisation: flax's defaults (lecun normal, zero biases; embeddings N(0, 1/D) x sqrt(D)),
  where tensor2tensor uses uniform_unit_scaling with gain 1.0 (transformer.py:1785-1787;
  utils/optimize.py:395);
- tokens: EOS after the targets only, 3 reserved ids; tensor2tensor appends EOS to the inputs
  too and reserves 2 (data_generators/algorithmic.py:72-74, :86);
- evaluation: 500 of 1,000 generated test_long examples, where tensor2tensor's dev split has
  10,000 (algorithmic.py:46-59).

Readings: training evaluates at plain positions 0, 1, 2, ... (summary.json); tensor2tensor's
own reading of the UTs, at random offsets redrawn per step, is
`python -m transformer_jax.analysis.reread_positions --workdir=RUN --eval_positions=step_offset`
on each run's final checkpoint (RUN/eval_positions/step_offset.json; a fresh draw per batch,
reproducible per seed), and experiments/reports/table4.py reports both.

Budget: at most 8 hours of a 2-core machine (--parallel=2) for copy and reverse, 3 variants x
3 seeds. Measured on copy: `taskset -c 0|1 python -m transformer_jax.main
--config=configs/universal_table4.py:copy` with a variant's overrides below and
--config.train.steps=200, each run pinned to one core with another run on the other core, as
--parallel=2 runs them (2-core AMD EPYC Zen 5, 2048^2 float32 matmul 0.36 TFLOP/s under
jax.jit; the runs' summary.json timing): a training step costs 0.27 s (Transformer),
1.06 s (UT) and 0.52 s (UT+ACT); an evaluation of every split 39, 77 and 47 s; start-up and
compiling ~30 s. At TRAIN_STEPS = 3,000 with an evaluation every 1,000 steps a (task, seed)
costs 1.85 x 3,000 + 3 x 163 + 90 = ~6,100 run-seconds, the 6 of them ~10 run-hours, ~5.1
hours at --parallel=2: inside the budget (on the Zen 3 kind, about twice slower, it is not).
3,000 steps stay inside tensor2tensor's 8,000-step warmup (peak rate 7.4e-4 at the last step, where
tensor2tensor reaches 2.0 x 128^-0.5 x 8,000^-0.5 = 2.0e-3): the seed-0 runs of copy come first
(`--seeds=0`), and a UT that has not learned the training lengths (test token accuracy below
0.99) by then says the budget, not the recipe, decides its row. So it went: at 3,000 steps the
Transformer's test token accuracy is 1.00, the UT's 0.45 and UT+ACT's 0.53 (0.76 and 0.69 read
at random offsets), seed 0 of copy. Each run's summary.json records
its wall_time_s, the full runs' own figure:

  python -m transformer_jax.sweep --sweep=experiments/universal_table4_t2t.py \
      --workdir=results/universal_table4_t2t/copy --parallel=2 --seed_groups=false
  python -m transformer_jax.sweep --sweep=experiments/universal_table4_t2t_reverse.py \
      --workdir=results/universal_table4_t2t/reverse --parallel=2 --seed_groups=false
  for run in results/universal_table4_t2t/*/ut*/seed_*; do  # the Transformer reads plain
      python -m transformer_jax.analysis.reread_positions --workdir=$run \
          --eval_positions=step_offset --splits=test,test_long
  done
  python -m experiments.reports.table4 --results=results/universal_table4_t2t
"""

from transformer_jax.sweep import Sweep

# The step budget that fits 8 hours of 2 cores for copy and reverse (the docstring's Budget).
TRAIN_STEPS = 3_000
MAX_LEN = 801  # a 401-token batch's offsets [0, 401) need positions up to 800

RECIPE = {  # tensor2tensor's transformer_tiny recipe, for every variant
    "model.d_model": 128,
    "model.ffn.d_ff": 512,
    "model.attention.num_heads": 4,
    "model.norm.position": "pre",
    "model.dropout_rate": 0.1,
    "model.attention.dropout_rate": 0.1,
    "model.ffn.dropout_rate": 0.1,
    "model.positional.max_len": MAX_LEN,
    "train.b1": 0.9,
    "train.b2": 0.997,
    "train.eps": 1e-9,
    "train.grad_clip_norm": 0.0,
    "train.label_smoothing": 0.1,
    "train.schedule": "rsqrt",
    "train.learning_rate": 2.0,
    "train.warmup_steps": 8_000,
    "train.steps": TRAIN_STEPS,
    "train.early_stop_metric": "",
    "train.eval_every": 1_000,
    "train.checkpoint_every": 1_000,
}
UT = {
    **RECIPE,
    "model.universal.enabled": True,
    "model.universal.steps": 8,
    "model.universal.step_signal": "learned",
    "model.positional.train_positions": "step_offset",
}
UT_ACT = {
    **UT,
    "model.universal.steps": 4,  # act_max_steps
    "model.universal.act": True,
    "model.universal.act_halting_bias_init": 1.0,
    "model.universal.act_threshold_eps": 0.01,
    "model.universal.act_ponder_cost": 0.01,
    "model.universal.act_halted": "transform",
}
ACCURACIES = ("token_accuracy", "seq_accuracy")  # the paper's character / sequence accuracy


def make_sweep(task: str) -> Sweep:
    """Table 4's comparison on one task of configs/universal_table4.py, tensor2tensor's recipe."""
    title = f"Universal Transformer vs Transformer on {task} at length 400 (tensor2tensor recipe)"
    details = __doc__.split("\n\n", 1)[1].rstrip()
    return Sweep(
        description=f"{title}\n\n{details}",
        config="configs/universal_table4.py",
        config_arg=task,
        variants={"transformer": RECIPE, "ut": UT, "ut_act": UT_ACT},
        seeds=(0, 1, 2),
        metrics=(
            *(f"{split}/{name}" for split in ("test_long", "test") for name in ACCURACIES),
            *(f"test_long/ponder_mean/{stack}" for stack in ("encoder", "decoder")),
        ),
        baseline="transformer",
    )


def get_sweep():
    return make_sweep("copy")
