"""`--plan`: how many confirmation seeds each comparison of a sequential sweep is expected to
need, from the paired seed-to-seed sd observed so far (or an assumed one).

For each declared comparison (sweep/sequential.py's `comparisons`) the plan simulates the
sweep's own design (its rounds, spending and margin; `sequential.simulate`, 4,000 sequences of
normal paired deltas) at the observed mean delta and sd, and prints the chance of each verdict
at n = max and the expected number of seeds, beside the fixed-n count (`sequential.fixed_n`,
80% power). With fewer than two paired confirmation seeds there is nothing observed: the plan
then uses --plan_sd at true deltas of 0, half the margin, the margin and twice it.
"""

import math
import os
from collections.abc import Mapping

import numpy as np

from transformer_jax import sweep_record
from transformer_jax.report import sequential_section, summary, tuning
from transformer_jax.sweep import grid_edges, sequential
from transformer_jax.sweep.spec import Sweep
from transformer_jax.sweep_dir import SWEEP_FILE, read_sweep_json

SIMS = 4000
HEADER = (
    "| Comparison | n | Δ | sd | different | equivalent | undecided | E[seeds] | fixed n |",
    "|---|---|---|---|---|---|---|---|---|",
)


def observed_deltas(sweep: Sweep, workdir: str) -> dict[sequential.Comparison, list[float]]:
    """Comparison -> the paired deltas of every confirmation seed both sides finished."""
    with sweep_record.unpacked(workdir):
        runs = summary.read_runs(sweep, workdir, None)
        chosen = tuning.select(sweep, runs).chosen
        values = sequential_section.confirmation_values(sweep, runs, chosen, workdir)
    out = {}
    for c in sequential.comparisons(sweep):
        by_variant = values[c.metric]
        a, b = by_variant.get(c.variant, {}), by_variant.get(c.other, {})
        seeds = [s for s in sweep.confirm_seeds if s in a and s in b]
        out[c] = [a[s] - b[s] for s in seeds if not (math.isnan(a[s]) or math.isnan(b[s]))]
    return out


def _row(sweep: Sweep, label: str, n: int, delta: float, sd: float, margin: float) -> str:
    design = sequential.Design(sweep.confirm_rounds, sweep.spending)
    sim = sequential.simulate(delta, sd, margin, design, sims=SIMS)
    cells = [
        label,
        str(n) if n else "assumed",
        f"{delta:+.4f}",
        f"{sd:.4f}",
        f"{sim[sequential.DIFFERENT]:.0%}",
        f"{sim[sequential.EQUIVALENT]:.0%}",
        f"{sim[sequential.UNDECIDED]:.0%}",
        f"{sim['mean_n']:.1f}",
        " / ".join(
            str(n) if math.isfinite(n) else "–" for n in sequential.fixed_n(delta, sd, margin)
        ),
    ]
    return "| " + " | ".join(cells) + " |"


def plan_lines(sweep: Sweep, observed: Mapping, assumed_sd: float) -> list[str]:
    """The plan as Markdown lines: one row per comparison (or per assumed delta)."""
    if not sweep.confirm_rounds:
        raise ValueError("--plan: the sweep has no confirm_rounds (nothing sequential to plan)")
    rounds = ", ".join(map(str, sweep.confirm_rounds))
    lines = [
        f"Plan for confirmation in rounds of {rounds} seeds ({sweep.spending} spending), "
        f"simulated on {SIMS} sequences of normal paired deltas per row. Columns: paired seeds "
        "observed, mean delta, paired sd, the chance the design ends *different*, *equivalent* "
        "or undecided at n = max, the expected seeds per comparison, and the seeds a fixed-n "
        "test needs at 80% power to exclude 0 / to show equivalence.",
    ]
    pending = []
    for c, deltas in observed.items():
        margin = sweep.equivalence_margins[c.metric]
        label = f"`{c.metric}` {c.label}" + (f" ({c.held_fixed})" if c.held_fixed else "")
        if len(deltas) >= 2 and np.std(deltas) > 0:
            sd = float(np.std(deltas, ddof=1))
            if len(lines) == 1:
                lines += ["", *HEADER]
            lines.append(_row(sweep, label, len(deltas), float(np.mean(deltas)), sd, margin))
        else:
            pending.append(label)
    if pending:
        lines += ["", f"No paired sd observed yet for {len(pending)}: {', '.join(pending)}."]
        if assumed_sd > 0:
            lines += [
                f"At an assumed paired sd of {assumed_sd:g} (--plan_sd), per true delta:",
                "",
                *HEADER,
            ]
            for metric, margin in sweep.equivalence_margins.items():
                for delta in (0.0, margin / 2, margin, 2 * margin):
                    lines.append(
                        _row(sweep, f"`{metric}` Δ = {delta:g}", 0, delta, assumed_sd, margin)
                    )
        else:
            lines.append("Give --plan_sd=SD (e.g. a pilot's paired sd) to plan them.")
    return lines


def plan(workdir: str, sweep_file: str | None, assumed_sd: float) -> str:
    """The plan of WORKDIR's sweep (its sweep.json, or --sweep's file for a fresh workdir)."""
    from transformer_jax.sweep.spec import load_sweep  # a sweep file runs user code: only here

    if os.path.isfile(os.path.join(workdir, SWEEP_FILE)):
        sweep = grid_edges.applied(Sweep.from_dict(read_sweep_json(workdir)), workdir)
        observed = observed_deltas(sweep, workdir)
    elif sweep_file:
        sweep = load_sweep(sweep_file)
        observed = {c: [] for c in sequential.comparisons(sweep)}
    else:
        raise ValueError(f"--plan: workdir {workdir!r} has no sweep.json; give --sweep=FILE")
    return "\n".join(plan_lines(sweep, observed, assumed_sd))
