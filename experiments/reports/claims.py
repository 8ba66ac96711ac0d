"""The README's claims table as one family: every Δ it cites, Holm-corrected together.

  python -m experiments.reports.claims --results=results

Each sweep's report corrects its own table (Holm over that report's comparisons); the README
quotes about forty of those Δs side by side, and a reader takes them as one body of evidence.
This recomputes each quoted Δ from the sweep's committed runs.csv (paired by seed; a tuned
sweep's cells at their chosen settings, read from selection.csv), adjusts the p-values with
Holm over the whole family, and gives each comparison a verdict against a declared margin:

- *different*: the 95% interval excludes 0 (`†` when it also survives the family's Holm);
- *equivalent*: the 90% interval lies inside ±margin (two one-sided t-tests at 5%);
- *inconclusive*: neither;
- *saturated*: both cells' means lie within the margin of the metric's bound (1 for
  accuracies, 0 for losses): the task cannot discriminate the cells on this metric.

Writes RESULTS/claims/claims.md and claims.csv. The family is CLAIMS below; a row names the
README row it backs, the sweep, the metric and the cells (variant names of runs.csv).
"""

import argparse
import csv
import dataclasses
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from transformer_jax.report import equivalence, stats
from transformer_jax.sweep_dir import read_runs_csv

SEQ, TOKEN_LONG, LOSS = "test/seq_accuracy", "test_long/token_accuracy", "test/loss"
ATTENTION_MAX = "test/attention_max_prob/encoder/layer_0/self_attention"
# Declared before looking at the family's verdicts: a 2-point accuracy difference (about the
# seed spread of the untuned cells) and 0.02 nats of test loss are what these small models
# could not be told apart by at three seeds anyway.
# The loss bands of charlm_length_extrapolation: that sweep file's own 0.02-nat margin.
BANDS = {k: f"test/loss_band_{k}x" for k in (2, 4, 8)}
MARGINS = {SEQ: 0.02, TOKEN_LONG: 0.02, LOSS: 0.02, ATTENTION_MAX: 0.02}
MARGINS.update(dict.fromkeys(BANDS.values(), 0.02))


@dataclasses.dataclass(frozen=True)
class Claim:
    """One Δ the README's claims table cites: cell `variant` minus cell `baseline`.

    `warmup` (tuned normalization only) compares a cell's best setting without warmup against
    its best with `warmup` steps, each chosen on mean validation loss (the report's "best at each
    value"), on the selection seeds; otherwise a tuned sweep's cells are read at their chosen
    settings, on the confirmation seeds where the sweep has them.
    """

    row: str
    sweep: str
    metric: str
    variant: str
    baseline: str
    label: str
    warmup: int = 0


def _claims() -> tuple[Claim, ...]:
    scale = "Without 1/sqrt(d_k) learning suffers"
    temperature = "Any large temperature works"
    order = "Without positions word order is invisible"
    rotary = "Rotary generalises to longer inputs"
    warmup = "Post-norm needs warmup, pre-norm does not"
    norms = "RMSNorm and DyT replace LayerNorm"
    residual = "Residuals make training work"
    rows = [
        (scale, "attention_scale", SEQ, "none", "sqrt_dk", "none − sqrt_dk, d_k 16"),
        (scale, "attention_scale", SEQ, "dk64_none", "dk64_sqrt_dk", "none − sqrt_dk, d_k 64"),
        (scale, "attention_scale_tuned", SEQ, "none", "sqrt_dk", "none − sqrt_dk, d_k 16"),
        (scale, "attention_scale_tuned", LOSS, "none", "sqrt_dk", "none − sqrt_dk, d_k 16"),
        (scale, "attention_scale_tuned", TOKEN_LONG, "none", "sqrt_dk", "none − sqrt_dk, d_k 16"),
        (
            scale,
            "attention_scale_tuned",
            SEQ,
            "dk64_none",
            "dk64_sqrt_dk",
            "none − sqrt_dk, d_k 64",
        ),
        (temperature, "attention_scale", SEQ, "constant_9487", "sqrt_dk", "sqrt(9487) − sqrt_dk"),
        (
            temperature,
            "attention_scale_tuned",
            SEQ,
            "constant_9487",
            "sqrt_dk",
            "sqrt(9487) − sqrt_dk",
        ),
        (
            temperature,
            "attention_scale_tuned",
            LOSS,
            "constant_9487",
            "sqrt_dk",
            "sqrt(9487) − sqrt_dk",
        ),
        (
            temperature,
            "attention_scale_tuned",
            TOKEN_LONG,
            "constant_9487",
            "sqrt_dk",
            "sqrt(9487) − sqrt_dk",
        ),
        (
            temperature,
            "attention_scale_tuned",
            ATTENTION_MAX,
            "constant_9487",
            "sqrt_dk",
            "sqrt(9487) − sqrt_dk",
        ),
        (order, "positional", SEQ, "none", "sinusoidal", "none − sinusoidal"),
        (order, "positional_tuned", SEQ, "none", "sinusoidal", "none − sinusoidal"),
        (rotary, "positional", TOKEN_LONG, "rotary", "sinusoidal", "rotary − sinusoidal"),
        (rotary, "positional_tuned", TOKEN_LONG, "rotary", "sinusoidal", "rotary − sinusoidal"),
        (rotary, "positional_tuned", TOKEN_LONG, "none", "sinusoidal", "none − sinusoidal"),
        (rotary, "positional_tuned", TOKEN_LONG, "learned", "sinusoidal", "learned − sinusoidal"),
        (rotary, "positional_tuned", SEQ, "learned", "sinusoidal", "learned − sinusoidal"),
        (
            warmup,
            "normalization",
            SEQ,
            "post_layernorm_no_warmup",
            "post_layernorm",
            "no warmup − 50, post, 2+2",
        ),
        (
            warmup,
            "normalization",
            SEQ,
            "pre_layernorm_no_warmup",
            "pre_layernorm",
            "no warmup − 50, pre, 2+2",
        ),
        (
            warmup,
            "normalization",
            SEQ,
            "post_layernorm_no_warmup_6_layers",
            "post_layernorm_6_layers",
            "no warmup − 50, post, 6+6",
        ),
        (
            warmup,
            "normalization",
            SEQ,
            "pre_layernorm_no_warmup_6_layers",
            "pre_layernorm_6_layers",
            "no warmup − 50, pre, 6+6",
        ),
        (
            warmup,
            "normalization",
            SEQ,
            "pre_layernorm_6_layers",
            "post_layernorm_6_layers",
            "pre − post, 6+6",
        ),
        (
            warmup,
            "normalization_tuned",
            SEQ,
            "pre_layernorm_6_layers",
            "post_layernorm_6_layers",
            "pre − post, 6+6",
        ),
        (
            norms,
            "normalization",
            SEQ,
            "post_rmsnorm",
            "post_layernorm",
            "RMSNorm − LayerNorm, post",
        ),
        (norms, "normalization", SEQ, "pre_dyt", "pre_layernorm", "DyT − LayerNorm, pre"),
        (
            norms,
            "normalization_tuned",
            SEQ,
            "post_rmsnorm",
            "post_layernorm",
            "RMSNorm − LayerNorm, post",
        ),
        (norms, "normalization_tuned", SEQ, "pre_dyt", "pre_layernorm", "DyT − LayerNorm, pre"),
        (
            norms,
            "normalization_tuned",
            SEQ,
            "pre_none",
            "pre_layernorm",
            "no norm − LayerNorm, pre",
        ),
        (
            norms,
            "normalization_tuned",
            TOKEN_LONG,
            "pre_dyt",
            "pre_layernorm",
            "DyT − LayerNorm, pre",
        ),
        (
            norms,
            "normalization_tuned",
            TOKEN_LONG,
            "pre_none",
            "pre_layernorm",
            "no norm − LayerNorm, pre",
        ),
        (
            residual,
            "normalization",
            SEQ,
            "post_layernorm_no_residual",
            "post_layernorm",
            "no residual − residual",
        ),
        (
            residual,
            "normalization_tuned",
            SEQ,
            "post_layernorm_no_residual",
            "post_layernorm",
            "no residual − residual",
        ),
        ("One head is worse than several", "heads", SEQ, "heads_1", "heads_4", "1 head − 4 heads"),
    ]
    # The character LM (tiny shakespeare), where the cells do not reach a bound: each figure
    # from the confirmation seeds, test loss (lower is better).
    scales, positions = "charlm_attention_scale", "charlm_positional"
    rows += [
        (scale, scales, LOSS, "none", "sqrt_dk", "none − sqrt_dk, d_k 16"),
        (scale, scales, LOSS, "dk64_none", "dk64_sqrt_dk", "none − sqrt_dk, d_k 64"),
        (temperature, scales, LOSS, "constant_9487", "sqrt_dk", "sqrt(9487) − sqrt_dk, d_k 16"),
        (
            temperature,
            scales,
            LOSS,
            "dk64_constant_9487",
            "dk64_sqrt_dk",
            "sqrt(9487) − sqrt_dk, d_k 64",
        ),
        (order, positions, LOSS, "none", "learned", "none − learned"),
        (
            "One head is worse than several",
            scales,
            LOSS,
            "dk64_sqrt_dk",
            "sqrt_dk",
            "1 head of d_k 64 − 4 of d_k 16",
        ),
    ]
    # Train short, test long (L = 64): each encoding against sinusoidal on the loss of the
    # positions past L, in the bands the README cites.
    lengths = "charlm_length_extrapolation"
    rows += [
        (rotary, lengths, BANDS[k], v, "sinusoidal", f"{v} − sinusoidal, {band}")
        for v in ("rotary", "alibi")
        for k, band in ((2, "(L, 2L]"), (4, "(2L, 4L]"), (8, "(4L, 8L]"))
    ]
    norm = "charlm_normalization"
    for depth in ("", "_6_layers"):
        layers = "6 layers" if depth else "2 layers"
        rows += [
            (
                norms,
                norm,
                LOSS,
                f"pre_{v}{depth}",
                f"pre_layernorm{depth}",
                f"{n} − LayerNorm, {layers}",
            )
            for v, n in (("rmsnorm", "RMSNorm"), ("dyt", "DyT"), ("none", "no norm"))
        ]
        rows.append(
            (
                residual,
                norm,
                LOSS,
                f"pre_layernorm_no_residual{depth}",
                f"pre_layernorm{depth}",
                f"no residual − residual, {layers}",
            )
        )
    claims = [Claim(*row) for row in rows]
    for cell in (
        "post_layernorm",
        "pre_layernorm",
        "post_layernorm_6_layers",
        "pre_layernorm_6_layers",
    ):
        for metric in (SEQ, LOSS):
            label = f"best without − best with warmup, {cell.replace('_', ' ')}"
            claims.append(
                Claim(warmup, "normalization_tuned", metric, cell, cell, label, warmup=50)
            )
        # On characters every cell took the longest warmup of its grid, so the row reads 100.
        label = f"best without − best with warmup, {cell.replace('_', ' ')}, characters"
        claims.append(Claim(warmup, norm, LOSS, cell, cell, label, warmup=100))
    return tuple(claims)


CLAIMS = _claims()


@dataclasses.dataclass(frozen=True)
class Verdict:
    claim: Claim
    variant_mean: float
    baseline_mean: float
    ci95: stats.PairedDifference
    margin: float
    p_family: float = math.nan

    @property
    def ci90(self) -> tuple[float, float]:
        """The interval of the two one-sided tests (report/equivalence.py)."""
        return equivalence.equivalence_interval(self.ci95)

    @property
    def saturated(self) -> bool:
        means = (self.variant_mean, self.baseline_mean)
        return equivalence.saturated(self.claim.metric, means, self.margin)

    @property
    def word(self) -> str:
        return equivalence.verdict(self.ci95, self.margin)


def _records(sweep_dir: Path):
    return read_runs_csv(str(sweep_dir / "runs.csv"), str(sweep_dir)).values()


def _by_seed(records, variant: str, metric: str) -> dict[int, float]:
    return {
        r.seed: r.metric(metric)
        for r in records
        if r.variant == variant and r.status == "finished" and r.metric(metric) is not None
    }


def _chosen(sweep_dir: Path) -> dict[str, str]:
    """Cell -> its chosen setting, from the tuned report's selection.csv."""
    with open(sweep_dir / "selection.csv", newline="") as f:
        return {row["variant"]: row["setting"] for row in csv.DictReader(f)}


def _best_setting(records, cell: str, warmup_steps: int) -> str:
    """The setting with the lowest mean validation loss among the cell's selection runs at this
    warmup (confirmation runs, "<cell>/confirm/<setting>", never take part in a choice)."""
    means: dict[str, list[float]] = {}
    for r in records:
        variant, _, setting = r.variant.partition("/")
        if variant != cell or setting.startswith("confirm/"):
            continue
        if not setting.endswith(f"_warmup_steps-{warmup_steps}"):
            continue
        loss = r.metric("validation/loss")
        if r.status == "finished" and loss is not None and math.isfinite(loss):
            means.setdefault(setting, []).append(loss)
    return min(means, key=lambda s: statistics.fmean(means[s]))


def _cells(claim: Claim, sweep_dir: Path, records) -> tuple[str, str]:
    """The two runs.csv variant names a claim compares."""
    if claim.warmup:
        return (
            f"{claim.variant}/{_best_setting(records, claim.variant, 0)}",
            f"{claim.baseline}/{_best_setting(records, claim.baseline, claim.warmup)}",
        )
    if not (sweep_dir / "selection.csv").exists():
        return claim.variant, claim.baseline
    chosen = _chosen(sweep_dir)
    names = {r.variant for r in records}

    def at_choice(cell: str) -> str:
        # A sweep with confirmation seeds scores the chosen setting on them alone
        # (sweep/selection.py): the seeds that chose it never give its figure.
        confirmed = f"{cell}/confirm/{chosen[cell]}"
        return confirmed if confirmed in names else f"{cell}/{chosen[cell]}"

    return at_choice(claim.variant), at_choice(claim.baseline)


def evaluate(results: Path, claims: Sequence[Claim] = CLAIMS) -> list[Verdict]:
    """Each claim's Δ, its 95% and 90% intervals and the family's Holm-adjusted p-values."""
    cache: dict[str, list] = {}
    verdicts = []
    for claim in claims:
        sweep_dir = results / claim.sweep
        records = cache.setdefault(claim.sweep, list(_records(sweep_dir)))
        variant, baseline = _cells(claim, sweep_dir, records)
        a = _by_seed(records, variant, claim.metric)
        b = _by_seed(records, baseline, claim.metric)
        if len(a) < 2 or len(b) < 2:
            raise ValueError(f"{claim.sweep}: {variant} or {baseline} has no {claim.metric} runs")
        if len(set(a) & set(b)) < 2:
            raise ValueError(
                f"{claim.sweep}: {variant} (seeds {sorted(a)}) and {baseline} (seeds "
                f"{sorted(b)}) share fewer than 2 seeds: a paired Δ needs the same seeds"
            )
        verdicts.append(
            Verdict(
                claim,
                statistics.fmean(a.values()),
                statistics.fmean(b.values()),
                stats.paired_difference(a, b, 0.95),
                MARGINS[claim.metric],
            )
        )
    adjusted = stats.holm([v.ci95.p_value for v in verdicts])
    return [dataclasses.replace(v, p_family=p) for v, p in zip(verdicts, adjusted, strict=True)]


def _signed(x: float) -> str:
    return f"{x:+.3f}"


def _verdict_text(v: Verdict) -> str:
    word = v.word + ("†" if v.word == "different" and v.p_family <= 0.05 else "")
    return word + (", saturated" if v.saturated else "")


# What the README cites that this family does not judge: each is judged in its own report.
LEFT_OUT = (
    "Left out of the family, each judged in its own report: the Multi30k BLEU differences (no "
    "margin was declared for BLEU before its runs; results/translation/report.md has their "
    "paired tests and a paired bootstrap over test sentences), the ViT norms "
    "(results/vit_norms/report.md), the Universal Transformer and Ruoss et al. rows (against "
    "the papers' figures: table4.md and their reports), and the train-short-test-long change "
    "of each encoding past its training length against inside it "
    "(results/charlm_length_extrapolation/extrapolation.md, Holm over its own 12). The "
    "decided character-LM sweeps (results/charlm_decided_*) are judged by their own sequential "
    "design, each comparison's error rates held over its looks by alpha spending (their "
    'reports\' "Seeds until decided"); a fixed-n test of seeds drawn until a bound was crossed '
    "would not hold its level, so they are not in this family."
)


def markdown(verdicts: Sequence[Verdict], command: str) -> str:
    lines = [
        "# The README's claims as one family",
        "",
        f"`{command}` (experiments/reports/claims.py): {len(verdicts)} comparisons, each",
        "recomputed from its sweep's runs.csv, paired by seed; tuned sweeps at their chosen",
        "settings. Verdicts: *different* (95% CI excludes 0; † also survives Holm over this whole",
        "family), *equivalent* (90% CI inside ±margin), *inconclusive*; *saturated*: both cells",
        "within the margin of the metric's bound (1 for accuracies, 0 for losses), where the",
        "task cannot tell the cells apart. Margins: "
        + ", ".join(f"{m} {x}" for m, x in MARGINS.items())
        + ".",
        "",
        LEFT_OUT,
        "",
        "| claim | sweep | metric | comparison | cells | Δ [95% CI] | 90% CI | p "
        "| p, Holm over the family | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v in verdicts:
        c = v.claim
        lines.append(
            f"| {c.row} | {c.sweep} | {c.metric} | {c.label} | "
            f"{v.variant_mean:.3f} vs {v.baseline_mean:.3f} | "
            f"{_signed(v.ci95.mean)} [{_signed(v.ci95.low)}, {_signed(v.ci95.high)}] | "
            f"[{_signed(v.ci90[0])}, {_signed(v.ci90[1])}] | {v.ci95.p_value:.2g} | "
            f"{v.p_family:.2g} | {_verdict_text(v)} |"
        )
    return "\n".join(lines) + "\n"


def _csv_row(v: Verdict) -> dict[str, object]:
    c = v.claim
    return {
        "row": c.row, "sweep": c.sweep, "metric": c.metric, "comparison": c.label,
        "variant_mean": v.variant_mean, "baseline_mean": v.baseline_mean, "diff": v.ci95.mean,
        "ci95_low": v.ci95.low, "ci95_high": v.ci95.high, "ci90_low": v.ci90[0],
        "ci90_high": v.ci90[1], "n_paired": v.ci95.n, "p": v.ci95.p_value,
        "p_holm_family": v.p_family, "margin": v.margin, "verdict": v.word,
        "saturated": v.saturated,
    }  # fmt: skip


def write(results: Path, verdicts: Sequence[Verdict], command: str) -> Path:
    out = results / "claims"
    out.mkdir(parents=True, exist_ok=True)
    (out / "claims.md").write_text(markdown(verdicts, command))
    rows = [_csv_row(v) for v in verdicts]
    with open(out / "claims.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out / "claims.md"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", help="the committed results folder")
    args = parser.parse_args(argv)
    results = Path(args.results)
    command = f"python -m experiments.reports.claims --results={args.results}"
    print(write(results, evaluate(results), command).read_text())


if __name__ == "__main__":
    main()
