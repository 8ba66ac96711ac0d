"""results/accelerators/tpu_aot.md: every shipped config compiled for Colab's v5e-1 and for
8-chip slices, on a CPU, with libtpu (requirements-tpu.txt).

  python -m benchmarks.tpu_table --out=results/accelerators/tpu_aot.md

For each config and slice (SLICE_CONFIGS limits a slice to some configs): the attention path
compiled, whether the train step compiles and fits (the run as shipped: its batch, jit data
parallel), its HBM per chip against the chip's, the largest global batch that fits (`python -m
transformer_jax.aot --fit`, at most --fit_compiles compiles), XLA's and the analytic bytes moved
per chip, and the range of roofline step times and tokens/s they give at the shipped batch.
Compiling is CPU heavy: the whole table is many compiles (--fit_compiles=0 skips the search).

The table is built row by row and resumes: rows already in --out for a slice made with the same
--fit_compiles are kept and only the missing (config, slice) rows are compiled, so a killed run
loses one row at most, and the table can be built a slice at a time (--topologies). Below the
table, one line per slice gives the command that reproduces its rows; --fresh recomputes the rows
asked for instead.
"""

import dataclasses
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from absl import app, flags

from benchmarks import speed_configs
from transformer_jax import defaults
from transformer_jax.aot import report
from transformer_jax.aot.fit import fit_batch, fits
from transformer_jax.aot.programs import attention_path, compile_train_counted, plan_run
from transformer_jax.aot.topology import get_topology, parse
from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.environment import cpu_model

TOPOLOGIES = ["v5e:1x1", "v5e:2x4", "v4:2x2x1", "v6e:2x4", "v6e:1x1"]  # Colab's v5e-1 first
DEFAULT_OUT = "results/accelerators/tpu_aot.md"

_OUT = flags.DEFINE_string("out", DEFAULT_OUT, "Markdown file to write (and resume).")
_TOPOLOGIES = flags.DEFINE_list("topologies", TOPOLOGIES, "TPU slices (row groups).")
_CONFIGS = flags.DEFINE_list("configs", [], "Only these rows (names as below); default all.")
_FIT_COMPILES = flags.DEFINE_integer("fit_compiles", 6, "Most compiles of each batch search.")
_FRESH = flags.DEFINE_bool(
    "fresh", False, "Recompute the rows asked for even when --out holds them (default: resume)."
)

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


# On one TPU chip model.attention.impl="auto" is the splash kernel where the lengths tile
# (layers/attention.py `resolve_impl`): these rows compile a config with the jax path instead,
# beside its own row, for the memory and time splash saves.
JAX_ATTENTION = {f"{name} [jax attention]": name for name in ("translation_big", "char_lm")}
ROW_NAMES = [*CONFIGS, *JAX_ATTENTION]

# Slices compiled for some rows only (default: the configs, CONFIGS): the one-chip slices with
# the jax-path twins; Colab's v6e-1 for the run the README quotes and the splash comparisons.
SLICE_CONFIGS = {
    "v5e:1x1": ROW_NAMES,
    "v6e:1x1": ["multi30k", "translation_big", "char_lm", *JAX_ATTENTION],
}


def configs_of(topology: str) -> list[str]:
    """The rows (config names) the table has on `topology`."""
    return SLICE_CONFIGS.get(topology, list(CONFIGS))


def load(name: str):
    if name in JAX_ATTENTION:
        config = load(JAX_ATTENTION[name])
        config.model.attention.impl = "jax"
        return config
    path, arg = CONFIGS[name]
    if path.startswith("benchmarks/"):
        return report.run_config(speed_configs.get_config(arg))
    return defaults.from_file(str(ROOT / path), arg)


def _cell(text: str) -> str:
    """An error message as one table cell: one line, no column separator."""
    return text.replace("|", "/")


def largest_batch(target, train, fit_compiles: int) -> str:
    """The batch column's second half: the largest global batch found to fit."""
    if not fit_compiles:
        return "-"
    found = fit_batch(target, fit_compiles, known=train)
    if not found.batch_size:
        return "none"
    if not found.too_big:  # every batch tried fits
        return f">= {found.batch_size}"
    if found.exact:
        return f"{found.batch_size}"
    return f"{found.batch_size}-{found.too_big - found.unit}"  # between the two probes


def row(name: str, topology_name: str, fit_compiles: int) -> str:
    """One line of the table; a config the compiler refuses says why."""
    topology = get_topology(topology_name)
    try:
        target = plan_run(load(name), topology)
    except ValueError as error:
        return f"| {name} | {topology_name} | - | no: {_cell(str(error))} |" + " |" * 5
    train = compile_train_counted(target)
    chip = topology.chip
    needed = report.needed_bytes(train)
    hbm = f"{report.gib(needed)} / {report.gib(chip.hbm_bytes)}" if needed else "?"
    if not train.compiled:
        status = f"no: {_cell(train.error[:160])}"
    else:
        status = "yes" if fits(target, train) else "compiles, does not fit"
    largest = largest_batch(target, train, fit_compiles)
    xla = f"{train.bytes_accessed / 1e9:,.2f}" if train.flops else "-"
    traffic = f"{xla} / {train.traffic.total / 1e9:,.2f}"
    if train.compiled and train.flops:
        time_s, rate = report.step_range(target, train)
    else:
        time_s = rate = "-"
    return (
        f"| {name} | {topology_name} | {attention_path(target, train)} | {status} | {hbm} | "
        f"{target.batch_size} / {largest} | {traffic} | {time_s} | {rate} |"
    )


@dataclasses.dataclass
class Part:
    """How one slice's rows were made: the batch search's budget, and the compiling time of
    the rows in the table (summed over the runs that added them)."""

    fit_compiles: int
    minutes: float = 0.0


@dataclasses.dataclass
class Table:
    rows: dict[tuple[str, str], str]  # (config, slice) -> its line
    parts: dict[str, Part]  # slice -> how its rows were made


_ROW = re.compile(r"^\| (?P<config>[^|]+?) \| (?P<slice>[^|]+?) \|")
_PART = re.compile(
    r"^- (?P<slice>\S+): `[^`]*--fit_compiles=(?P<fit>\d+)[^`]*` "
    r"\(\d+ rows?, (?P<minutes>[\d.]+) minutes"
)
_HEADER = (
    "| config | slice | attention | fits? | HBM GiB / chip | batch: shipped / largest | "
    "GB moved / chip: XLA / analytic | step | rate |"
)
_COLUMNS = _HEADER.count("|")


def read_table(path: Path) -> Table:
    """The rows and per-slice provenance a previous run wrote; rows of a slice without a
    provenance line (a table written by hand or by an older version) are dropped."""
    if not path.exists():
        return Table({}, {})
    rows, parts = {}, {}
    for line in path.read_text().splitlines():
        if (match := _PART.match(line)) is not None:
            parts[match["slice"]] = Part(int(match["fit"]), float(match["minutes"]))
        elif (
            line != _HEADER
            and (match := _ROW.match(line))
            and match["config"] != "---"
            and line.count("|") == _COLUMNS  # a row of an older layout is recomputed
        ):
            rows[(match["config"], match["slice"])] = line
    rows = {key: line for key, line in rows.items() if key[1] in parts}
    # A slice none of whose rows is kept starts afresh, its compiling time too.
    return Table(rows, {s: part for s, part in parts.items() if any(k[1] == s for k in rows)})


def command(topology: str, fit_compiles) -> str:
    return (
        f"python -m benchmarks.tpu_table --out={DEFAULT_OUT} --topologies={topology} "
        f"--fit_compiles={fit_compiles}"
    )


def _batch_text() -> str:
    return (
        "Batch: shipped / largest global batch that fits, found by a search of compiles (the "
        "memory of two probes aims the next; transformer_jax/aot/fit.py) within the slice's "
        "--fit_compiles compiles (below): a "
        "range when the search stopped before it was exact, >= when every batch tried fit, - "
        "where the slice was made without a search (`python -m transformer_jax.aot --fit` "
        "searches one row)."
    )


def _order(slices: list[str]):
    def key(item):
        (name, topology), _ = item
        config_index = ROW_NAMES.index(name) if name in ROW_NAMES else len(ROW_NAMES)
        return slices.index(topology), config_index, name

    return key


def render(table: Table) -> str:
    """The whole file: intro, rows (slice by slice), per-slice provenance, and what is missing."""
    slices = TOPOLOGIES + sorted({s for _, s in table.rows} - set(TOPOLOGIES))
    machine = f"{os.cpu_count()} CPU cores ({cpu_model() or 'unknown model'})"
    lines = [
        "# The shipped configs on TPU slices, compiled ahead of time",
        "",
        "Each row: the config's train step as shipped (its batch, jit data parallel, its dtype), "
        "compiled with libtpu's TPU compiler on a CPU for the slice. HBM: the step's peak per "
        "chip (arguments + outputs - donated + temporaries + code) / the chip's capacity; where "
        "the compiler refuses the step, the figure its out-of-memory message gives (at least "
        "that: it may count the temporaries alone). "
        + _batch_text()
        + " Attention: the implementation `model.attention.impl` compiles to for the slice "
        "(`jax`: jax.nn.dot_product_attention; `splash`: the Pallas kernel, whose FLOPs XLA's "
        "count leaves out; rows `[jax attention]` compile the jax path instead). GB moved per "
        "chip: XLA's bytes accessed / an "
        "analytic count of the step's HBM traffic (weights, gradients, optimizer state, saved "
        "activations; transformer_jax/aot/traffic.py). Step time and rate: roofline estimates at "
        "the shipped batch, the range the two byte counts give with XLA's FLOPs and the chip's "
        "published figures (transformer_jax/aot/chips.py): estimates, not measurements, and "
        "lower bounds on a real step (see docs/accelerators.md).",
        "",
        _HEADER,
        "|" + " --- |" * (_COLUMNS - 1),
        *(line for _, line in sorted(table.rows.items(), key=_order(slices))),
        "",
        f"Each slice's rows, made on {machine} and reproduced by its command (which keeps the "
        "rows already in the file and adds the missing ones; `--fresh` recomputes them):",
        "",
    ]
    for topology in slices:
        count = sum(1 for _, s in table.rows if s == topology)
        if topology in table.parts and count:
            part = table.parts[topology]
            lines.append(
                f"- {topology}: `{command(topology, part.fit_compiles)}` "
                f"({count} row{'s' * (count != 1)}, {part.minutes:.1f} minutes of compiling)"
            )
    missing = [
        (name, topology)
        for topology in slices
        for name in configs_of(topology)
        if (name, topology) not in table.rows
    ]
    if missing:
        per_slice = {}
        for name, topology in missing:
            per_slice.setdefault(topology, []).append(name)
        listed = "; ".join(
            f"{s}: {'all' if len(names) == len(configs_of(s)) else ', '.join(names)}"
            for s, names in per_slice.items()
        )
        total = sum(len(configs_of(s)) for s in slices)
        lines += [
            "",
            f"Incomplete: {total - len(missing)} of {total} rows (configs x "
            f"{', '.join(slices)}). Missing: {listed}. A slice's command above adds its "
            f"missing rows; `{command('<slice>', '<N>')}` starts a slice not listed there.",
        ]
    return "\n".join(lines) + "\n"


def build(
    out: Path,
    names: list[str],
    topologies: list[str],
    fit_compiles: int,
    *,
    fresh: bool = False,
    make_row: Callable[[str, str, int], str] | None = None,
) -> Table:
    """Adds the missing rows of `names` x `topologies` to `out`, writing it after each row."""
    make_row = make_row or row
    table = read_table(out)
    for topology in topologies:
        part = table.parts.get(topology)
        if part is None or part.fit_compiles != fit_compiles:  # made otherwise: start afresh
            table.rows = {key: line for key, line in table.rows.items() if key[1] != topology}
            table.parts[topology] = Part(fit_compiles)
    if fresh:
        asked = {(name, topology) for name in names for topology in topologies}
        table.rows = {key: line for key, line in table.rows.items() if key not in asked}
    out.parent.mkdir(parents=True, exist_ok=True)
    for topology in topologies:
        for name in names:
            if (name, topology) in table.rows or name not in configs_of(topology):
                continue
            start = time.perf_counter()
            line = make_row(name, topology, fit_compiles)
            table.parts[topology].minutes += (time.perf_counter() - start) / 60
            table.rows[(name, topology)] = line
            print(line, flush=True)
            out.write_text(render(table))
    out.write_text(render(table))
    return table


@one_line_errors("tpu_table")
def main(argv):
    del argv
    unknown = [name for name in _CONFIGS.value if name not in ROW_NAMES]
    if unknown:
        raise ValueError(f"--configs={','.join(unknown)}: valid names are {', '.join(ROW_NAMES)}")
    for topology in _TOPOLOGIES.value:  # a bad slice fails before the first compile
        parse(topology)
    if _FIT_COMPILES.value < 0:
        raise ValueError(f"--fit_compiles={_FIT_COMPILES.value}: must be 0 (no search) or more")
    build(
        Path(_OUT.value),
        _CONFIGS.value or ROW_NAMES,
        _TOPOLOGIES.value,
        _FIT_COMPILES.value,
        fresh=_FRESH.value,
    )


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("tpu_table"))
