"""The Universal Transformer paper's algorithmic tasks (Dehghani et al. 2019, §3.1, Table 4)
with its data and lengths, at the size of its reference code's algorithmic runs; where the
training recipe departs from tensor2tensor's: experiments/universal_table4.py, docs/papers.md.

Data (data.variant="t2t"): tensor2tensor's algorithmic_{identity,reverse,addition}_decimal40:
decimal symbols, 100,000 training examples of lengths 1-40 (addition: 40 input tokens, operands
least significant digit first around a separator, sum least significant digit first), and
test_long = its dev split, lengths 1-400. "test" (1,000 examples of the training lengths) is
the validation split that early stopping watches.

Model: tensor2tensor's `transformer_tiny` / `universal_transformer_tiny` hparams (the
`*_position_random_timing_tiny` sets the paper's algorithmic runs used): d_model=128,
d_ff=512, 4 heads, 2 encoder + 2 decoder layers; its UT shares one block per stack over 8
recurrent steps. That reference size does not fit this machine's budget (2 CPU cores: the
8-step UT trains at 0.28 steps/s, ~27 hours for the Table 4 sweep), so
experiments/universal_table4.py runs the largest that does, d_model=64, d_ff=256, 4 UT steps,
and says why there. The argument picks the task: `:copy` (default), `:reverse`, `:addition`,
with `,quick` for a smoke run.

Training: until validation token accuracy plateaus (train.early_stop_*: no gain above 0.001
in 2 evaluations 500 steps apart, not before step 1,000), at most train.steps. The rsqrt
schedule (Vaswani eq. 3, tensor2tensor's default family) does not depend on the step budget,
which early stopping needs.
"""

from transformer_jax import defaults

TASKS = ("copy", "reverse", "addition")
TRAIN_LENGTH, TEST_LENGTH = 40, 400  # tensor2tensor's train_length and dev_length


def get_config(arg: str | None = None):
    task, quick = defaults.parse_arg(arg, TASKS, default="copy")
    config = defaults.base_config(task)
    config.data.update(
        variant="t2t",
        max_len=TRAIN_LENGTH,
        long_max_len=TEST_LENGTH,
        num_train=100_000,  # tensor2tensor's train_size
        num_test=1_000,  # validation: the training lengths
        num_test_long=1_000,  # of tensor2tensor's dev_size 10,000: evaluating costs
        batch_size=64,
    )
    config.model.update(d_model=128, dropout_rate=0.1)  # transformer_tiny
    config.model.attention.num_heads = 4
    config.model.ffn.d_ff = 512
    config.train.update(
        steps=10_000,  # a cap (see the experiment); early stopping ends most runs sooner
        schedule="rsqrt",
        learning_rate=1.0,  # peak d^-0.5 * 1000^-0.5: 2.8e-3 at d=128, 4.0e-3 at d=64
        warmup_steps=1_000,
        log_every=100,
        eval_every=500,
        checkpoint_every=500,
        eval_examples=500,  # per split: test_long evaluations at length 400 cost
        diagnostics=True,  # evaluation only: ACT's ponder_mean is one of them
        # Token, not sequence, accuracy: a model learning slowly sits at a sequence accuracy
        # near 0 for thousands of steps while its token accuracy climbs, and would be stopped.
        early_stop_metric="test/token_accuracy",
        early_stop_patience=2,
        early_stop_min_delta=0.001,
        early_stop_min_steps=1_000,
    )
    # tensor2tensor's accuracy and accuracy_per_sequence are teacher-forced, as are our
    # token_accuracy and seq_accuracy; greedy decoding of 400 tokens would cost more than training.
    config.train.evaluators.generation.enabled = False
    if quick:
        config = defaults.shrink(config)
        config.data.update(max_len=8, long_max_len=24)
    return config
