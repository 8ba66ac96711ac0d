"""What each component switch costs: training step time relative to the unchanged model.

  python -m benchmarks.switch_costs [--config=benchmarks/speed_configs.py:small] \
      [--out=results/speed/switch_costs.md]

Every variant is the benchmark model with one override (the same `train_step` the trainer runs,
compiled once each); all are compiled first, then timed in interleaved rounds (one untimed step,
then `--round_steps` timed ones, variant after variant), so a change in the machine's load
affects all alike. Prints, and writes as markdown, the median step time of each and its ratio to
the baseline's.
"""

import sys
from pathlib import Path

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from benchmarks.timing import JaxRunner, run_rounds, synthetic_batches
from transformer_jax.config import ModelConfig
from transformer_jax.train import host_memory
from transformer_jax.train.trainer import git_commit

_CONFIG = config_flags.DEFINE_config_file(
    "config", "benchmarks/speed_configs.py:small", "Benchmark config of the baseline."
)
_ROUNDS = flags.DEFINE_integer("rounds", 6, "Timing rounds.")
_ROUND_STEPS = flags.DEFINE_integer("round_steps", 3, "Timed steps per variant per round.")
_OUT = flags.DEFINE_string("out", "", "Markdown file to write the table to.")

# (label, model overrides): one switch each, away from the baseline (speed_configs.py).
VARIANTS = [
    ("baseline (auto attention, learned positions, pre-LayerNorm, GELU, dropout 0.1)", {}),
    ("attention_impl=jax (jax.nn.dot_product_attention)", {"attention_impl": "jax"}),
    ("attention_scale=none", {"attention_scale": "none"}),
    ("attention_scale=learned", {"attention_scale": "learned"}),
    ("num_kv_heads=1 (multi-query)", {"num_kv_heads": 1}),
    ("num_kv_heads=2 (grouped-query)", {"num_kv_heads": 2}),
    ("sliding_window=32", {"sliding_window": 32}),
    ("sliding_window=32, num_global_tokens=4", {"sliding_window": 32, "num_global_tokens": 4}),
    ("positional=sinusoidal", {"positional": "sinusoidal"}),
    ("positional=rotary", {"positional": "rotary"}),
    ("positional=alibi", {"positional": "alibi"}),
    ("positional=none", {"positional": "none"}),
    ("norm=rmsnorm", {"norm": "rmsnorm"}),
    ("norm=dyt", {"norm": "dyt"}),
    ("norm=batchnorm", {"norm": "batchnorm"}),
    ("norm=none", {"norm": "none"}),
    ("norm_position=post", {"norm_position": "post"}),
    ("residual=False", {"residual": False}),
    ("activation=relu", {"activation": "relu"}),
    ("activation=swiglu", {"activation": "swiglu"}),
    ("tie_output_embeddings=True", {"tie_output_embeddings": True}),
    ("dropout_rate=0", {"dropout_rate": 0.0}),
    ("attention_dropout_rate=0.1", {"attention_dropout_rate": 0.1}),
    ("scan_layers=True", {"scan_layers": True}),
    ("remat=full", {"remat": "full"}),
    ("remat=dots_saveable", {"remat": "dots_saveable"}),
    ("universal=True (4 steps, one shared block)", {"universal": True, "ut_steps": 4}),
    ("universal=True, act=True", {"universal": True, "ut_steps": 4, "act": True}),
    ("dtype=bfloat16", {"dtype": "bfloat16"}),
]


def main(argv):
    del argv
    host_memory.reuse_freed_memory()
    config = _CONFIG.value
    configs = {}
    for label, overrides in VARIANTS:  # All validated before anything compiles.
        configs[label] = ModelConfig(**{**config.model.to_dict(), **overrides})
    baseline = VARIANTS[0][0]
    batches = synthetic_batches(configs[baseline], config.batch_size, config.seq_len, count=4)
    runners = {}
    for label, cfg in configs.items():
        runners[label] = JaxRunner(cfg, config.train, batches[0])
        print(f"compiled {label} in {runners[label].compile_s:.1f} s", flush=True)
    steps = _ROUNDS.value * _ROUND_STEPS.value
    times = run_rounds(runners, batches, 2, steps, _ROUND_STEPS.value)
    medians = {label: float(np.median(seconds)) for label, seconds in times.items()}
    device = jax.devices()[0]
    lines = [
        f"# Step time of each switch ({config.name} benchmark model)",
        "",
        f"`python -m benchmarks.switch_costs {' '.join(sys.argv[1:])}`",
        f"at commit {git_commit()[:7]},",
        f"{device.platform} ({device.device_kind}), {jax.device_count()} device(s), jax "
        f"{jax.__version__}; batch {config.batch_size} x {config.seq_len}, median of {steps} "
        "steps per variant, interleaved.",
        "",
        "| variant | step (ms) | relative step time |",
        "| --- | --- | --- |",
    ]
    for label, median in medians.items():
        lines.append(f"| {label} | {median * 1e3:.1f} | {median / medians[baseline]:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if _OUT.value:
        Path(_OUT.value).parent.mkdir(parents=True, exist_ok=True)
        Path(_OUT.value).write_text(text)


if __name__ == "__main__":
    app.run(main)
