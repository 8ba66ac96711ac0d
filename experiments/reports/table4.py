"""The paper's Table 4 beside ours, in its layout, with a verdict per cell.

  python -m experiments.reports.table4 --results=results/universal_table4

reads each task's runs.csv (written by the sweeps of experiments/universal_table4*.py) and
writes RESULTS/table4.md: per task, the paper's character / sequence accuracy at length 400
(Dehghani et al. 2019, Table 4) for the Transformer and the UT, ours for the five variants (mean
over the finished seeds, n), and a verdict for each of the paper's two cells:

- Transformer: the paper's claim is that it fails at length 400. "reproduced" when none of our
  Transformer variants reaches the paper's UT sequence accuracy, i.e. it fails there as well;
  otherwise "not reproduced".
- UT: the claim is that it generalises far better than the Transformer. "reproduced" when our
  UT's character accuracy at 400 beats our Transformer's (paired by seed, the 95% interval
  above 0); "reproduced only with random offsets" when only a UT with offsets (with or without
  ACT) beats the better of our two Transformers that way; otherwise "not reproduced". With
  fewer than two paired seeds there is no interval and the verdict is "pending".
"""

import argparse
from pathlib import Path

from transformer_jax.report import stats
from transformer_jax.sweep_dir import read_runs_csv

PAPER = {  # task -> model -> (char accuracy, sequence accuracy) at length 400
    "copy": {"transformer": (0.53, 0.03), "ut": (0.91, 0.35)},
    "reverse": {"transformer": (0.13, 0.06), "ut": (0.96, 0.46)},
    "addition": {"transformer": (0.07, 0.00), "ut": (0.34, 0.02)},
}
VARIANTS = {  # ours: sweep variant -> column heading
    "transformer": "Transformer",
    "transformer_offset": "Transformer + offsets",
    "ut": "UT",
    "ut_offset": "UT + offsets",
    "ut_act_offset": "UT + ACT + offsets",
}
CHAR, SEQ = "test_long/token_accuracy", "test_long/seq_accuracy"


def per_seed(records: dict, variant: str, metric: str) -> dict[int, float]:
    """seed -> value of the finished runs of `variant`."""
    return {
        seed: record.metric(metric)
        for (name, seed), record in records.items()
        if name == variant and record.status == "finished" and record.metric(metric) is not None
    }


def cell(records: dict, variant: str) -> str:
    """ "char / seq (n=seeds)", the means over the finished seeds, or "–"."""
    char, seq = per_seed(records, variant, CHAR), per_seed(records, variant, SEQ)
    if not char:
        return "–"
    means = (stats.mean(list(values.values())) for values in (char, seq))
    return " / ".join(f"{m:.2f}" for m in means) + f" (n={len(char)})"


def beats(records: dict, variant: str, baseline: str) -> bool | None:
    """Whether `variant`'s character accuracy at 400 beats `baseline`'s, paired by seed with
    the 95% interval above 0; None without two paired seeds."""
    diff = stats.paired_difference(
        per_seed(records, variant, CHAR), per_seed(records, baseline, CHAR)
    )
    if diff.n < 2:
        return None
    return diff.excludes_zero and diff.mean > 0


def transformer_verdict(task: str, records: dict) -> str:
    ut_seq = PAPER[task]["ut"][1]
    seq = [
        stats.mean(list(values.values()))
        for variant in ("transformer", "transformer_offset")
        if (values := per_seed(records, variant, SEQ))
    ]
    if not seq:
        return "pending"
    return "reproduced" if max(seq) < ut_seq else "not reproduced"


def ut_verdict(records: dict) -> str:
    plain = beats(records, "ut", "transformer")
    if plain:
        return "reproduced"
    means = {
        name: stats.mean(list(v.values()))
        for name in ("transformer", "transformer_offset")
        if (v := per_seed(records, name, CHAR))
    }
    best_transformer = max(means, key=means.get) if means else "transformer"
    with_offsets = [
        beats(records, name, best_transformer) for name in ("ut_offset", "ut_act_offset")
    ]
    if any(with_offsets):
        return "reproduced only with random offsets"
    if plain is None or None in with_offsets:
        return "pending"
    return "not reproduced"


def task_row(task: str, records: dict) -> str:
    paper = [" / ".join(f"{x:.2f}" for x in PAPER[task][model]) for model in ("transformer", "ut")]
    ours = [cell(records, variant) for variant in VARIANTS]
    verdicts = [transformer_verdict(task, records), ut_verdict(records)]
    return f"| {task} | " + " | ".join(paper + ours + verdicts) + " |"


def table4(results: Path) -> str:
    """The markdown of table4.md from RESULTS/<task>/runs.csv, for the tasks that have one."""
    columns = [
        "task",
        "paper: Transformer",
        "paper: UT",
        *(f"ours: {name}" for name in VARIANTS.values()),
        "verdict: Transformer",
        "verdict: UT",
    ]
    lines = [
        "# Table 4 (Dehghani et al. 2019) beside ours",
        "",
        "Character (token) / sequence accuracy on test lengths 1-400 after training on",
        "1-40; ours: means over the finished seeds (n). Written by",
        "`python -m experiments.reports.table4`, whose docstring gives the verdicts' rules.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for task in PAPER:
        runs_csv = results / task / "runs.csv"
        if runs_csv.is_file():
            lines.append(task_row(task, read_runs_csv(str(runs_csv), str(results / task))))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results/universal_table4", type=Path)
    args = parser.parse_args()
    if not args.results.is_dir():
        parser.error(f"--results={args.results} is not a directory")
    out = args.results / "table4.md"
    out.write_text(table4(args.results))
    print(out.read_text(), end="")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
