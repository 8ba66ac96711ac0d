"""Paired bootstrap resampling of test BLEU between trained runs (Koehn 2004), by sacreBLEU.

A sweep report's seed-paired interval asks whether a variant differs from the baseline across
training seeds. The bootstrap asks the narrower question of one pair of trained models: does
system B score a higher BLEU than system A on this test set by more than the choice of test
sentences explains? sacreBLEU resamples the test sentences with replacement (1,000 samples, its
fixed seed 12345), scores both systems on every sample and reports the share of samples in which
the difference is at least as far from zero as observed (its p-value, with add-one smoothing).

Reads the translations a run with the bleu evaluator enabled writes (translations/test.txt for
beam search, test.greedy.txt for greedy decoding, test.ref.txt the references):

  python -m transformer_jax.report.bleu_bootstrap --baseline=runs/a --systems=runs/b,runs/c
"""

import dataclasses
import os
from collections.abc import Mapping, Sequence

from absl import app, flags
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.run_dir import TRANSLATIONS_DIR

# decoding -> file of its test translations; the references are REFERENCES_FILE.
TRANSLATION_FILES = {"beam": "test.txt", "greedy": "test.greedy.txt"}
REFERENCES_FILE = "test.ref.txt"
NUM_SAMPLES = 1000  # sacreBLEU's default for the paired bootstrap

_BASELINE = flags.DEFINE_string("baseline", None, "The baseline's run directory.")
_SYSTEMS = flags.DEFINE_list("systems", None, "Run directories compared with the baseline.")
_DECODING = flags.DEFINE_enum("decoding", "beam", list(TRANSLATION_FILES), "Which translations.")
_METRIC = flags.DEFINE_enum("metric", "bleu", ["bleu", "bleu_lc"], "Cased or lowercased BLEU.")


@dataclasses.dataclass(frozen=True)
class BootstrapComparison:
    """One system against the baseline on the same test sentences."""

    system: str
    bleu: float
    baseline_bleu: float
    p_value: float  # two-sided, from sacreBLEU's paired bootstrap
    mean: float  # the system's BLEU averaged over the bootstrap samples
    ci_half_width: float  # of the system's BLEU, 95%, over the bootstrap samples

    @property
    def delta(self) -> float:
        return self.bleu - self.baseline_bleu


def _read_lines(path: str) -> list[str]:
    if not os.path.isfile(path):
        raise ValueError(
            f"{path!r} does not exist: a run writes its test translations when it trains with "
            "train.evaluators.bleu.enabled=True and finishes"
        )
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def read_translations(run: str, decoding: str = "beam") -> tuple[list[str], list[str]]:
    """(hypotheses, references) of a finished run's test split."""
    if decoding not in TRANSLATION_FILES:
        raise ValueError(
            f"decoding={decoding!r} is not valid; choose one of {list(TRANSLATION_FILES)}"
        )
    folder = os.path.join(run, TRANSLATIONS_DIR)
    hypotheses = _read_lines(os.path.join(folder, TRANSLATION_FILES[decoding]))
    references = _read_lines(os.path.join(folder, REFERENCES_FILE))
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{folder!r}: {len(hypotheses)} translations but {len(references)} references"
        )
    return hypotheses, references


def paired_bootstrap(
    baseline: Sequence[str],
    systems: Mapping[str, Sequence[str]],
    references: Sequence[str],
    *,
    metric: str = "bleu",
    num_samples: int = NUM_SAMPLES,
) -> tuple[list[BootstrapComparison], str]:
    """Compares each system's translations with the baseline's; returns them and the signature.

    metric: a transformer_jax.decoding.bleu.VARIANTS name ("bleu" cased, "bleu_lc" lowercased).
    """
    # Here, not at the top: the decoding package imports JAX, which a report without
    # translations (and the sweep command, which writes the report) does not need.
    from transformer_jax.decoding.bleu import VARIANTS

    if metric not in VARIANTS:
        raise ValueError(f"metric={metric!r} is not valid; choose one of {list(VARIANTS)}")
    if not systems:
        raise ValueError("systems is empty: give at least one system to compare with the baseline")
    for name, hypotheses in {"baseline": baseline, **systems}.items():
        if len(hypotheses) != len(references):
            raise ValueError(
                f"system {name!r} has {len(hypotheses)} translations for {len(references)} "
                "references; every system must translate the same test sentences"
            )
    named = [("baseline", list(baseline))] + [(n, list(h)) for n, h in systems.items()]
    # sacreBLEU keys its results by the metric's own name ("BLEU"), whatever key it is given.
    test = PairedTest(
        named,
        {"BLEU": BLEU(**VARIANTS[metric])},
        [list(references)],
        test_type="bs",
        n_samples=num_samples,
    )
    signatures, results = test()
    baseline_result, *system_results = results["BLEU"]
    comparisons = [
        BootstrapComparison(
            system=name,
            bleu=float(r.score),
            baseline_bleu=float(baseline_result.score),
            # sacreBLEU counts resampled differences strictly above the observed one, which
            # gives identical translations its smallest p-value instead of 1.
            p_value=1.0 if list(systems[name]) == list(baseline) else float(r.p_value),
            mean=float(r.mean),
            ci_half_width=float(r.ci),
        )
        for name, r in zip(systems, system_results, strict=True)
    ]
    return comparisons, str(signatures["BLEU"])


def compare_runs(
    baseline_run: str, system_runs: Sequence[str], *, decoding: str = "beam", metric: str = "bleu"
) -> tuple[list[BootstrapComparison], str]:
    """paired_bootstrap of the test translations of finished runs; systems named by their path."""
    baseline, references = read_translations(baseline_run, decoding)
    systems = {}
    for run in system_runs:
        hypotheses, run_references = read_translations(run, decoding)
        if run_references != references:
            raise ValueError(
                f"{run!r} and {baseline_run!r} were tested on different references; a paired "
                "test needs the same test set in the same order"
            )
        systems[run] = hypotheses
    return paired_bootstrap(baseline, systems, references, metric=metric)


def markdown_table(comparisons: Sequence[BootstrapComparison], baseline: str) -> str:
    lines = [
        f"| System | BLEU | Δ vs `{baseline}` | 95% CI (bootstrap) | p |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in comparisons:
        lines.append(
            f"| `{c.system}` | {c.bleu:.2f} | {c.delta:+.2f} | {c.mean:.2f} ± "
            f"{c.ci_half_width:.2f} | {c.p_value:.4f} |"
        )
    return "\n".join(lines)


def sweep_section(runs: Mapping[str, Sequence], baseline: str) -> list[str]:
    """Markdown lines comparing every variant's finished runs with the baseline's of the same
    seed by paired bootstrap (beam-search translations, cased BLEU); empty when the sweep's runs
    wrote no translations. runs: variant -> its RunRecords (transformer_jax.sweep_dir)."""

    def translated(record) -> bool:
        folder = os.path.join(record.path, TRANSLATIONS_DIR)
        return record.status == "finished" and os.path.isfile(
            os.path.join(folder, TRANSLATION_FILES["beam"])
        )

    rows, signature = [], ""
    for base in filter(translated, runs[baseline]):
        # One test per seed: sacreBLEU scores the baseline once for all its systems.
        variants = {
            r.path: variant
            for variant, records in runs.items()
            if variant != baseline
            for r in records
            if r.seed == base.seed and translated(r)
        }
        if variants:
            comparisons, signature = compare_runs(base.path, list(variants))
            rows += [(variants[c.system], base.seed, c) for c in comparisons]
    rows.sort(key=lambda row: list(runs).index(row[0]))
    if not rows:
        return []
    lines = [
        "## Paired bootstrap over test sentences",
        "",
        f"| Variant | Seed | BLEU `{baseline}` | BLEU | Δ | p |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| `{v}` | {seed} | {c.baseline_bleu:.2f} | {c.bleu:.2f} | {c.delta:+.2f} | "
        f"{c.p_value:.4f} |"
        for v, seed, c in rows
    ]
    lines += [
        "",
        "Each trained model against the baseline trained with the same seed, on the beam-search "
        "test translations: sacreBLEU's paired bootstrap resampling over test sentences (Koehn "
        "2004), two-sided p. It says whether two trained models differ beyond the choice of test "
        "sentences, not whether the variant differs across training seeds (the Δ column of the "
        f"results table does). Signature: `{signature}`.",
    ]
    return lines


@one_line_errors("bleu_bootstrap")
def main(argv: Sequence[str]) -> None:
    del argv
    comparisons, signature = compare_runs(
        _BASELINE.value, _SYSTEMS.value, decoding=_DECODING.value, metric=_METRIC.value
    )
    print(markdown_table(comparisons, _BASELINE.value))
    print(f"\nsacreBLEU: {signature}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["baseline", "systems"])
    app.run(main, flags_parser=parse_flags("bleu_bootstrap"))
