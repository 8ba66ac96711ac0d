"""Train short, test long: loss by position and whether each encoding stays flat past L.

  python -m experiments.reports.length_extrapolation --folder=results/charlm_length_extrapolation

Reads the sweep's record (runs.jsonl: each run's metrics.jsonl, whose last test line holds the
length_extrapolation evaluator's loss per position bucket and per band) and writes into the
folder:

- loss_by_position.png: per encoding the mean over seeds of the test loss in each bucket of
  positions (1-16, 17-32, ... up to 8 L), the band the seeds' min and max, the training length
  L and its multiples marked (Press et al. 2022, Figure 1, draws perplexity against length);
- extrapolation.md and extrapolation.csv: per encoding and band k in {2, 4, 8}, the paired
  change loss_band_kx - loss_band_1x (the loss past the training length against the loss
  inside it, same model, same seed) with its 95% t interval, Holm over the 12 comparisons, and
  a verdict at the sweep's 0.02-nat margin: *flat* when the 90% interval lies inside ±margin,
  *rises* or *falls* when the 95% interval excludes 0, else *inconclusive*.

The report.md beside it compares the encodings with each other (each against sinusoidal).
"""

import argparse
import csv
import json
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transformer_jax.report import equivalence, stats  # noqa: E402

MARGIN = 0.02  # experiments/charlm_length_extrapolation.py's equivalence margin
BANDS = (2, 4, 8)
BUCKET = re.compile(r"^loss_pos_(\d+)_(\d+)$")


def final_test_line(entry: dict) -> dict:
    """The last test evaluation of a recorded run (its metrics.jsonl in the record)."""
    lines = [json.loads(x) for x in entry["files"]["metrics.jsonl"].splitlines() if x.strip()]
    tests = [x for x in lines if x.get("split") == "test" and "loss_band_1x" in x]
    if not tests:
        raise ValueError(
            f"{entry['variant']} seed {entry['seed']}: no test line with loss_band_1x in its "
            "metrics.jsonl (was the length_extrapolation evaluator enabled?)"
        )
    return tests[-1]


def read(folder: Path) -> dict[str, dict[int, dict]]:
    """encoding -> seed -> the final test line, for every finished run of the record."""
    out: dict[str, dict[int, dict]] = {}
    with open(folder / "runs.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                entry = json.loads(line)
                if entry["status"] == "finished":
                    out.setdefault(entry["variant"], {})[entry["seed"]] = final_test_line(entry)
    return out


def training_length(folder: Path) -> int:
    sweep = json.loads((folder / "sweep.json").read_text())
    lengths = {
        v["model.positional.max_len"] for v in sweep["variants"].values()
    }  # every variant trains at one L
    if len(lengths) != 1:
        raise ValueError(f"sweep.json: the variants train at several lengths {sorted(lengths)}")
    return lengths.pop()


def plot(runs: dict[str, dict[int, dict]], length: int, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.2), constrained_layout=True)
    for encoding, by_seed in runs.items():
        buckets = sorted(
            (int(m[1]), int(m[2]), key)
            for key in next(iter(by_seed.values()))
            if (m := BUCKET.match(key))
        )
        x = [(lo + hi) / 2 for lo, hi, _ in buckets]
        values = [[line[key] for line in by_seed.values()] for _, _, key in buckets]
        mean = [stats.mean(v) for v in values]
        (drawn,) = ax.plot(x, mean, marker=".", label=f"{encoding} (n={len(by_seed)})")
        ax.fill_between(
            x,
            [min(v) for v in values],
            [max(v) for v in values],
            alpha=0.2,
            lw=0,
            color=drawn.get_color(),
        )
    for k, name in ((1, "L"), (2, "2L"), (4, "4L")):
        ax.axvline(k * length, color="grey", lw=0.8, ls="--")
        ax.text(k * length, 0.02, f" {name}", color="grey", transform=ax.get_xaxis_transform())
    ax.set_xlabel("position in the window (characters)")
    ax.set_ylabel("test loss (nats per character)")
    ax.set_title(f"Trained on windows of L = {length}; read on windows of {8 * length}")
    ax.legend(title="line: mean; band: min-max over seeds", fontsize=8, title_fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def comparisons(runs: dict[str, dict[int, dict]]) -> list[dict]:
    rows = []
    for encoding, by_seed in runs.items():
        inside = {s: line["loss_band_1x"] for s, line in by_seed.items()}
        for k in BANDS:
            past = {s: line[f"loss_band_{k}x"] for s, line in by_seed.items()}
            diff = stats.paired_difference(past, inside)
            low, high = equivalence.equivalence_interval(diff)
            rows.append(dict(encoding=encoding, band=k, diff=diff, tost=(low, high)))
    adjusted = stats.holm([r["diff"].p_value for r in rows])
    for row, p in zip(rows, adjusted, strict=True):
        row["holm_p"] = p
        d, (low, high) = row["diff"], row["tost"]
        if d.excludes_zero:
            row["verdict"] = "rises" if d.mean > 0 else "falls"
        elif low > -MARGIN and high < MARGIN:
            row["verdict"] = "flat"
        else:
            row["verdict"] = "inconclusive"
    return rows


def write_tables(rows: list[dict], length: int, folder: Path) -> None:
    lines = [
        "# Loss past the training length, against the loss inside it",
        "",
        "Per encoding, the paired change loss_band_kx − loss_band_1x: the mean test loss at "
        f"positions (k/2 · L, k · L] for k = 2, 4, 8 against positions (0, L], L = {length}, "
        "in the same windows of the same model and seed (positive: loss the encoding adds past "
        "the length it trained at). 95% t interval over the seeds; Holm over the "
        f"{len(rows)} comparisons; *flat* when the 90% interval lies inside ±{MARGIN:g} nats "
        "(two one-sided t-tests at 5%), *rises* / *falls* when the 95% interval excludes 0, "
        "else *inconclusive*. Written by `python -m experiments.reports.length_extrapolation "
        "--folder=results/charlm_length_extrapolation` from the folder's runs.jsonl.",
        "",
        "| Encoding | Band | n | Δ vs (0, L] [95% CI] | 90% interval | Holm p | Verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, (low, high) = r["diff"], r["tost"]
        p = "–" if math.isnan(r["holm_p"]) else f"{r['holm_p']:.3g}"
        band = {2: "(L, 2L]", 4: "(2L, 4L]", 8: "(4L, 8L]"}[r["band"]]
        lines.append(
            f"| {r['encoding']} | {band} | {d.n} | {d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] "
            f"| [{low:+.3f}, {high:+.3f}] | {p} | **{r['verdict']}** |"
        )
    (folder / "extrapolation.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open(folder / "extrapolation.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(
            [
                "encoding",
                "band",
                "n",
                "diff",
                "low",
                "high",
                "tost_low",
                "tost_high",
                "holm_p",
                "verdict",
            ]
        )
        for r in rows:
            d = r["diff"]
            writer.writerow(
                [
                    r["encoding"],
                    f"{r['band']}x",
                    d.n,
                    repr(d.mean),
                    repr(d.low),
                    repr(d.high),
                    *map(repr, r["tost"]),
                    repr(r["holm_p"]),
                    r["verdict"],
                ]
            )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True, help="the sweep's results folder")
    folder = Path(parser.parse_args(argv).folder)
    runs = read(folder)
    length = training_length(folder)
    plot(runs, length, folder / "loss_by_position.png")
    write_tables(comparisons(runs), length, folder)
    print(f"wrote loss_by_position.png, extrapolation.md and extrapolation.csv into {folder}")


if __name__ == "__main__":
    main()
