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

from benchmarks.timing import JaxRunner, run_rounds, synthetic_batches, typed_configs
from transformer_jax.commands import parse_flags
from transformer_jax.run_dir import git_commit
from transformer_jax.train import host_memory

_CONFIG = config_flags.DEFINE_config_file(
    "config", "benchmarks/speed_configs.py:small", "Benchmark config of the baseline."
)
_ROUNDS = flags.DEFINE_integer("rounds", 6, "Timing rounds.")
_ROUND_STEPS = flags.DEFINE_integer("round_steps", 3, "Timed steps per variant per round.")
_OUT = flags.DEFINE_string("out", "", "Markdown file to write the table to.")

# (label, model overrides as dotted paths, as on the command line): one switch each, away from
# the baseline (speed_configs.py).
VARIANTS = [
    ("baseline (auto attention, learned positions, pre-LayerNorm, GELU, dropout 0.1)", {}),
    ("attention.impl=jax (jax.nn.dot_product_attention)", {"attention.impl": "jax"}),
    ("attention.scale=none", {"attention.scale": "none"}),
    ("attention.scale=learned", {"attention.scale": "learned"}),
    ("attention.num_kv_heads=1 (multi-query)", {"attention.num_kv_heads": 1}),
    ("attention.num_kv_heads=2 (grouped-query)", {"attention.num_kv_heads": 2}),
    ("attention.sliding_window=32", {"attention.sliding_window": 32}),
    (
        "attention.sliding_window=32, attention.num_global_tokens=4",
        {"attention.sliding_window": 32, "attention.num_global_tokens": 4},
    ),
    ("positional.kind=sinusoidal", {"positional.kind": "sinusoidal"}),
    ("positional.kind=rotary", {"positional.kind": "rotary"}),
    ("positional.kind=alibi", {"positional.kind": "alibi"}),
    ("positional.kind=none", {"positional.kind": "none"}),
    ("norm.kind=rmsnorm", {"norm.kind": "rmsnorm"}),
    ("norm.kind=dyt", {"norm.kind": "dyt"}),
    ("norm.kind=batchnorm", {"norm.kind": "batchnorm"}),
    ("norm.kind=none", {"norm.kind": "none"}),
    ("norm.position=post", {"norm.position": "post"}),
    ("norm.residual=False", {"norm.residual": False}),
    ("ffn.activation=relu", {"ffn.activation": "relu"}),
    ("ffn.activation=swiglu", {"ffn.activation": "swiglu"}),
    ("embeddings.tie_output=True", {"embeddings.tie_output": True}),
    ("dropout_rate=0", {"dropout_rate": 0.0}),
    ("attention.dropout_rate=0.1", {"attention.dropout_rate": 0.1}),
    ("scan_layers=True", {"scan_layers": True}),
    ("remat=full", {"remat": "full"}),
    ("remat=dots_saveable", {"remat": "dots_saveable"}),
    # Setting a universal.* field switches the Universal Transformer on (universal.enabled=True).
    ("universal.enabled=True (4 steps, one shared block)", {"universal.steps": 4}),
    (
        "universal.enabled=True, universal.act=True",
        {"universal.steps": 4, "universal.act": True},
    ),
    ("dtype=bfloat16", {"dtype": "bfloat16"}),
]


def main(argv):
    del argv
    host_memory.reuse_freed_memory()
    config = _CONFIG.value
    base, train_config = typed_configs(config)
    # All validated before anything compiles.
    configs = {label: base.override(overrides) for label, overrides in VARIANTS}
    baseline = VARIANTS[0][0]
    batches = synthetic_batches(configs[baseline], config.batch_size, config.seq_len, count=4)
    runners = {}
    for label, cfg in configs.items():
        runners[label] = JaxRunner(cfg, train_config, batches[0])
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
    app.run(main, flags_parser=parse_flags("switch_costs"))
