"""The report's sections for seeds until decided (sweep/sequential.py) and the grid extensions
(sweep/grid_edges.py): per comparison n, looks, the repeated interval and the verdict, or
"undecided at n = max"; per cell the extensions its grid received and why."""

import csv
import io
import math
from collections.abc import Mapping

from transformer_jax.sweep import grid_edges, selection, sequential
from transformer_jax.sweep.spec import Sweep

SEQUENTIAL_CSV = "sequential.csv"


def confirmation_values(sweep: Sweep, runs, chosen: Mapping[str, Mapping[int, str]], workdir):
    """metric -> variant -> confirm seed -> value, for the variants whose choice is final."""
    final = grid_edges.final(sweep, workdir, runs)
    settings = {v: next(iter(c.values())) for v, c in chosen.items() if c and v in final}
    return sequential.confirm_values(sweep, runs, settings)


def decisions(sweep: Sweep, runs, chosen: Mapping[str, Mapping[int, str]], workdir: str):
    """Comparison -> Decision (None before its first look) of every declared comparison."""
    return sequential.decide(sweep, confirmation_values(sweep, runs, chosen, workdir))


def _num(x: float, digits: int) -> str:
    return "–" if math.isnan(x) else f"{x:+.{digits}f}"


def section(sweep: Sweep, found, digits: int = 3) -> list[str]:
    """The "Seeds until decided" section (Markdown lines)."""
    design = sequential.Design(sweep.confirm_rounds, sweep.spending)
    name = {sequential.OBRIEN_FLEMING: "O'Brien-Fleming-type", sequential.POCOCK: "Pocock-type"}
    lines = [
        f"Confirmation in rounds of {', '.join(map(str, sweep.confirm_rounds))} seeds. After "
        f"each round every comparison below is judged at the bounds of a Lan-DeMets "
        f"alpha-spending design ({name[sweep.spending]} spending, Lan & DeMets 1983; alpha = "
        f"{design.alpha:g} for the two-sided test and for each one-sided test of TOST), each "
        "look's nominal z bound used at its nominal level as a t bound with n−1 degrees of "
        "freedom (sweep/sequential.py); a comparison stops at its first deciding look and a "
        "cell trains the next round only while one of its comparisons is undecided. Nominal z "
        "bounds, two-sided: "
        + ", ".join(f"{z:.3f}" for z in design.two_sided)
        + "; one-sided: "
        + ", ".join(f"{z:.3f}" for z in design.one_sided)
        + ". Interval: the repeated "
        f"{1 - design.alpha:.0%} interval of the deciding (or last) look; TOST interval: the "
        f"repeated {1 - 2 * design.alpha:.0%} one, inside ±margin for *equivalent*. These, not "
        "the fixed-n intervals above, are the verdicts.",
        "",
    ]
    header = ["Metric", "Comparison", "Held fixed", "n", "Looks", "Δ", "Interval"]
    header += ["TOST interval", "Margin", "Verdict"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for c, d in found.items():
        margin = f"±{sweep.equivalence_margins[c.metric]:g}"
        if d is None:
            cells = [f"`{c.metric}`", c.label, c.held_fixed or "–", "0", "0", "–", "–", "–"]
            cells += [margin, "pending (first round not done)"]
        else:
            cells = [f"`{c.metric}`", c.label, c.held_fixed or "–", str(d.n), str(d.looks)]
            cells += [
                _num(d.mean, digits),
                f"[{_num(d.low, digits)}, {_num(d.high, digits)}]",
                f"[{_num(d.tost_low, digits)}, {_num(d.tost_high, digits)}]",
                margin,
                f"**{d.text}**",
            ]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return lines


def to_csv(found) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["metric", "variant", "other", "held_fixed", "n", "looks", "diff"]
        + ["low", "high", "tost_low", "tost_high", "verdict"]
    )
    for c, d in found.items():
        row = [c.metric, c.variant, c.other, c.held_fixed]
        if d is None:
            row += ["0", "0", "", "", "", "", "", "pending"]
        else:
            nums = (d.mean, d.low, d.high, d.tost_low, d.tost_high)
            row += [d.n, d.looks, *("" if math.isnan(x) else repr(x) for x in nums), d.text]
        writer.writerow(row)
    return out.getvalue()


def extension_lines(sweep: Sweep, workdir: str, runs) -> list[str]:
    """The grid extensions the record holds, and the cells still on an edge (Markdown)."""
    entries = grid_edges.read_record(workdir)
    ext = sweep.grid_extension
    lines = [
        "",
        "### Grid extensions",
        "",
        f"Boundary check (sweep/grid_edges.py): a cell whose best lies on an edge of "
        f"{', '.join(f'`{k}`' for k in ext.keys)}, its inner neighbour worse by more than "
        f"max(margin {ext.margin:g}, seed spread) in `{sweep.select_on}`, is extended outward "
        f"by the axis' own step, up to {ext.max_rounds} round(s)"
        + ("; then one refinement round at half the step" if ext.refine else "")
        + f". Recorded in `{grid_edges.RECORD_FILE}`; decided on validation alone.",
        "",
    ]
    if entries:
        lines += [
            "| Variant | Round | Kind | Key | New values | Why |",
            "|---|---|---|---|---|---|",
        ]
        for e in entries:
            lines.append(
                f"| {e['variant']} | {e['round']} | {e['kind']} | `{e['key']}` | "
                f"{', '.join(map(str, e['values']))} | {e['reason']} |"
            )
    else:
        lines.append("No cell's grid needed extending.")
    still = {
        v: edges
        for v in sweep.variants
        if (edges := grid_edges.edges(sweep, runs, v))
        and selection.cell_means(selection.variant_scores(sweep, runs, v), sweep.seeds)
    }
    if still:
        lines += [
            "",
            "Still on an edge (⚠ in the table above): "
            + "; ".join(
                f"{v} ({', '.join(f'{_leaf(k)} {s}' for k, s in e.items())})"
                for v, e in still.items()
            )
            + ": flat ground there (the inner neighbour within the threshold), or the rounds "
            "were spent.",
        ]
    return lines


def _leaf(key: str) -> str:
    return key.rpartition(".")[2]
