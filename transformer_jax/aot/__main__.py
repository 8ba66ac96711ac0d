"""Compile a run for a TPU slice on this machine, and say whether it fits and how fast it would be.

  python -m transformer_jax.aot --config=configs/multi30k.py --topology=v5e:1x1
  python -m transformer_jax.aot --config=configs/vit_paper.py:b16 --topology=v5e:2x4 \
      --config.train.fsdp=8 --fit
  python -m transformer_jax.aot --config=benchmarks/speed_configs.py:gpt2_small --topology=v4:2x2x1
  python -m transformer_jax.aot --sweep=experiments/quickstart.py --topology=local
  python -m transformer_jax.aot --sweep=experiments/universal_table4_t2t_buckets.py \
      --variant=ut_act --topology=v5e:1x1

Needs libtpu (pip install -r requirements-tpu.txt), no TPU. Prepares the run with the trainer's
own `prepare` for the slice and compiles, with the real TPU compiler, the programs the run
executes (transformer_jax/aot/programs.py); prints the attention implementation they use and,
for each: compiled or the compiler's error, HBM per chip against the chip's capacity, XLA's
FLOPs and bytes accessed (for the train step also an analytic HBM-traffic count,
transformer_jax/aot/traffic.py), and the roofline step time, tokens/s and MFU bound on the
chip's published figures (transformer_jax/aot/chips.py): estimates, a range where the two
traffic figures differ. `--fit` finds the largest global batch whose train step fits.
`--group=N` also compiles a run group of N members (train/seed_group.py: a tuned cell's rates
and seeds as one vmapped program) and compares its roofline step with N of one member's.
`--topology=local` compiles for this machine's own devices instead (a CPU's figures are
measured); `--sweep` takes a sweep file's baseline run as the config (`--variant`: another of
its variants).
A benchmark config (benchmarks/speed_configs.py) is compiled on rows of its sequence length.
Exit status 2 with one `aot: error:` line for a bad topology, config or batch, and for a train
step that does not fit.
"""

from absl import app, flags
from ml_collections import config_flags

from transformer_jax.aot import report
from transformer_jax.aot.fit import fit_batch
from transformer_jax.aot.programs import compile_group, compile_programs, plan_run
from transformer_jax.aot.topology import get_topology
from transformer_jax.commands import one_line_errors, parse_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment or benchmark config file.")
_SWEEP = flags.DEFINE_string("sweep", None, "Or a sweep file: its baseline variant's run.")
_VARIANT = flags.DEFINE_string("variant", None, "With --sweep: this variant's run instead.")
_TOPOLOGY = flags.DEFINE_string("topology", "v5e:1x1", "TPU slice: v5e:1x1, v5e:2x4, v4:2x2x1...")
_FIT = flags.DEFINE_bool("fit", False, "Also find the largest global batch that fits.")
_FIT_COMPILES = flags.DEFINE_integer(
    "fit_compiles", 10, "Most train-step compiles --fit makes.", lower_bound=1
)
_DECODE = flags.DEFINE_bool("decode", True, "Also compile the evaluators' decoding programs.")
_GROUP = flags.DEFINE_integer(
    "group", 0, "Also compile a run group of this many members (a tuned cell as one program)."
)


@one_line_errors("aot")
def main(argv):
    del argv
    if _GROUP.value and _GROUP.value < 2:  # before anything compiles
        raise ValueError(f"--group={_GROUP.value} is invalid; valid: 0 (none) or 2 or more members")
    topology = get_topology(_TOPOLOGY.value)  # A bad name fails before any config work.
    if (_CONFIG.value is None) == (_SWEEP.value is None):
        raise ValueError("give one of --config=<config file> or --sweep=<sweep file>")
    if _VARIANT.value is not None and not _SWEEP.value:
        raise ValueError(f"--variant={_VARIANT.value} needs --sweep=<sweep file>")
    if _SWEEP.value:
        path, config = report.sweep_variant(_SWEEP.value, _VARIANT.value)
    else:
        path = config_flags.get_config_filename(flags.FLAGS["config"])
        config = report.run_config(_CONFIG.value)
    target = plan_run(config, topology)  # The trainer's own preparation and checks.
    programs = compile_programs(target, decode=_DECODE.value)
    report.check_fits(target, programs[0])  # One error line, exit 2, when the train step won't.
    for line in report.header(target, path, programs[0]):
        print(line)
    for program in programs:
        print(report.program_line(target, program))
    if _GROUP.value:
        group = compile_group(target, _GROUP.value)
        print(report.program_line(target, group))
        print(report.group_line(target, programs[0], group))
    if _FIT.value:
        found = fit_batch(target, _FIT_COMPILES.value, known=programs[0])
        print(report.fit_line(target, found))


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("aot"))
