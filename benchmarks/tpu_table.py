"""results/accelerators/tpu_aot.md: every shipped config compiled for Colab's v5e-1 and for
8-chip slices, on a CPU, with libtpu (requirements-tpu.txt).

  python -m benchmarks.tpu_table --out=results/accelerators/tpu_aot.md

For each config and slice: whether the train step compiles and fits (the run as shipped: its
batch, jit data parallel), its HBM per chip against the chip's, the largest global batch that
fits (`python -m transformer_jax.aot --fit`, at most --fit_compiles compiles), and the roofline
step time and tokens/s at the shipped batch. Compiling is CPU heavy: the whole table is many
compiles (--fit_compiles=0 skips the search).
"""

import sys
import time
from pathlib import Path

from absl import app, flags

from benchmarks import speed_configs
from transformer_jax import defaults
from transformer_jax.aot import report
from transformer_jax.aot.fit import fit_batch, fits
from transformer_jax.aot.programs import compile_programs, plan_run
from transformer_jax.aot.topology import get_topology

_OUT = flags.DEFINE_string("out", "results/accelerators/tpu_aot.md", "Markdown file to write.")
_TOPOLOGIES = flags.DEFINE_list(
    "topologies", ["v5e:1x1", "v5e:2x4", "v4:2x2x1", "v6e:2x4"], "TPU slices (columns)."
)
_CONFIGS = flags.DEFINE_list("configs", [], "Only these rows (names as below); default all.")
_FIT_COMPILES = flags.DEFINE_integer("fit_compiles", 6, "Most compiles of each batch search.")

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {  # row name -> (config file, argument)
    "algorithmic:copy": ("configs/algorithmic.py", "copy"),
    "multi30k": ("configs/multi30k.py", None),
    "translation_base": ("configs/translation_base.py", None),
    "translation_big": ("configs/translation_big.py", None),
    "vit_paper:ti16": ("configs/vit_paper.py", "ti16"),
    "vit_paper:s16": ("configs/vit_paper.py", "s16"),
    "vit_paper:b16": ("configs/vit_paper.py", "b16"),
    "char_lm": ("configs/char_lm.py", None),
    "speed_configs:gpt2_small": ("benchmarks/speed_configs.py", "gpt2_small"),
}


def load(name: str):
    path, arg = CONFIGS[name]
    if path.startswith("benchmarks/"):
        return report.run_config(speed_configs.get_config(arg))
    return defaults.from_file(str(ROOT / path), arg)


def row(name: str, topology_name: str) -> str:
    """One line of the table; a config the compiler refuses says why."""
    topology = get_topology(topology_name)
    try:
        plan = plan_run(load(name), topology)
    except ValueError as error:
        return f"| {name} | {topology_name} | no: {error} | | | | |"
    train = compile_programs(plan, decode=False)[0]
    chip = topology.chip
    needed = report.needed_bytes(train)
    hbm = f"{report.gib(needed)} / {report.gib(chip.hbm_bytes)}" if needed else "?"
    if not train.compiled:
        status = f"no: {train.error[:160]}"
    else:
        status = "yes" if fits(plan, train) else "compiles, does not fit"
    largest = "-"
    if _FIT_COMPILES.value:
        found = fit_batch(plan, _FIT_COMPILES.value)
        if not found.batch_size:
            largest = "none"
        elif not found.too_big:  # every batch tried fits
            largest = f">= {found.batch_size}"
        elif found.exact:
            largest = f"{found.batch_size}"
        else:  # fits at the first, not at the second less one unit: somewhere between
            largest = f"{found.batch_size}-{found.too_big - found.unit}"
    if train.compiled and train.flops:
        estimate = report.estimate(plan, train)
        time_s = f"{estimate.seconds * 1e3:,.1f} ms ({estimate.bound})"
        rate = f"{estimate.tokens_per_s:,.0f} {report.unit(plan)}/s"
    else:
        time_s = rate = "-"
    return (
        f"| {name} | {topology_name} | {status} | {hbm} | {plan.batch_size} / {largest} | "
        f"{time_s} | {rate} |"
    )


def _batch_text() -> str:
    if not _FIT_COMPILES.value:
        return (
            "Batch: shipped / largest that fits, not searched in this table (each probe is a "
            "compile; `python -m transformer_jax.aot --fit` searches one row)."
        )
    return (
        "Batch: shipped / largest global batch that fits, found by doubling or halving the "
        f"shipped batch and bisecting (at most {_FIT_COMPILES.value} compiles: a range when "
        "the search stopped before it was exact, >= when every batch tried fit)."
    )


def _flags_shown() -> list[str]:
    """The command's flags, --out as the committed table's path (it may be written elsewhere)."""
    return [a if not a.startswith("--out=") else f"--out={_OUT.default}" for a in sys.argv[1:]]


def main(argv):
    del argv
    names = _CONFIGS.value or list(CONFIGS)
    start = time.perf_counter()
    lines = [
        "# The shipped configs on TPU slices, compiled ahead of time",
        "",
        "Each row: the config's train step as shipped (its batch, jit data parallel, its dtype), "
        "compiled with libtpu's TPU compiler on a CPU for the slice. HBM: the step's peak per "
        "chip (arguments + outputs - donated + temporaries + code) / the chip's capacity. "
        + _batch_text()
        + " Step time and rate: roofline estimates at the "
        "shipped batch from XLA's counts and the chip's published figures "
        "(transformer_jax/aot/chips.py): lower bounds on a real step (see "
        "docs/accelerators.md).",
        "",
        "| config | slice | fits? | HBM GiB / chip | batch: shipped / largest | step | rate |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    out = Path(_OUT.value)
    out.parent.mkdir(parents=True, exist_ok=True)
    for topology in _TOPOLOGIES.value:  # Colab's v5e-1 first; the file grows row by row.
        for name in names:
            line = row(name, topology)
            print(line, flush=True)
            lines.append(line)
            out.write_text("\n".join(lines) + "\n")
    minutes = (time.perf_counter() - start) / 60
    lines += [
        "",
        f"Generated by `python -m benchmarks.tpu_table {' '.join(_flags_shown())}` "
        f"({minutes:,.0f} minutes of compiling).",
    ]
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    app.run(main)
