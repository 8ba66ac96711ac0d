"""The small model every shipped ablation sweep starts from (experiments/*.py).

A 2+2-layer encoder-decoder with d_model=64 on an algorithmic task, sized so that one run takes
about a minute on 2 CPU cores and the baseline solves the in-distribution test split. The
argument picks the task: --config=configs/ablation.py:reverse (default), :copy, :sort, :addition;
append ",quick" (or pass just "quick") to shrink further.
"""

from transformer_jax import defaults

TASKS = ("reverse", "copy", "sort", "addition")


def get_config(arg: str | None = None):
    task, quick = defaults.parse_arg(arg, TASKS, default="reverse")
    config = defaults.base_config(task)
    config.model.update(d_model=64, dropout_rate=0.0)
    config.model.attention.num_heads = 4
    config.model.ffn.d_ff = 128
    config.model.positional.max_len = 32
    if task != "addition":
        config.data.update(max_len=16, long_min_len=17, long_max_len=24, num_train=20_000)
    config.data.num_test = 500
    config.data.num_test_long = 500
    # A split apart from test that tuned sweeps choose learning rates on (docs/tuning.md).
    config.data.num_validation = 500
    config.train.update(
        steps=500,
        learning_rate=2e-3,
        warmup_steps=50,
        log_every=50,
        eval_every=250,
        checkpoint_every=250,
    )
    # Greedy decoding scores what teacher-forced seq_accuracy already does (each step's argmax
    # is the next input), so one split keeps the check and the longer one is skipped.
    config.train.evaluators.generation.splits = ("test",)
    return defaults.shrink(config) if quick else config
