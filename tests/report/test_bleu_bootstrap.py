"""Paired bootstrap of test BLEU between runs (transformer_jax/report/bleu_bootstrap.py)."""

import os

import pytest
import sacrebleu

from transformer_jax.report import bleu_bootstrap
from transformer_jax.run_dir import TRANSLATIONS_DIR
from transformer_jax.sweep_dir import RunRecord

REFERENCES = [
    "A man rides a bicycle down the street.",
    "Two dogs play in the snow.",
    "A woman in a red coat reads a book.",
    "Children are playing football on a field.",
    "An old man sits on a bench in the park.",
    "A girl jumps into a swimming pool.",
    "Three people walk along the beach at sunset.",
    "A chef cooks food in a busy kitchen.",
] * 5
# Drops words and confuses nouns in every sentence, so it is worse on every resample.
WORSE = [
    "A man rides bicycle street.",
    "Two cats play in snow.",
    "A woman in coat reads a newspaper.",
    "Children are playing on a grass.",
    "An man sits on a chair.",
    "A girl jumps into water.",
    "Three people walk the sand.",
    "A cook makes food in kitchen.",
] * 5


def write_run(root, name, hypotheses, references=REFERENCES):
    folder = root / name / TRANSLATIONS_DIR
    folder.mkdir(parents=True)
    (folder / "test.txt").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    (folder / "test.ref.txt").write_text("".join(r + "\n" for r in references), encoding="utf-8")
    return str(root / name)


def test_scores_are_sacrebleus_and_a_clearly_better_system_is_significant():
    comparisons, signature = bleu_bootstrap.paired_bootstrap(
        WORSE, {"perfect": REFERENCES, "same": WORSE}, REFERENCES
    )
    perfect, same = comparisons
    assert perfect.baseline_bleu == pytest.approx(sacrebleu.corpus_bleu(WORSE, [REFERENCES]).score)
    assert perfect.bleu == pytest.approx(100.0)
    assert perfect.delta > 50 and perfect.p_value < 0.01
    # Identical translations differ in no resample (sacreBLEU itself would say p = 0.001).
    assert same.delta == 0.0 and same.p_value == pytest.approx(1.0)
    assert "bs:1000" in signature and "case:mixed" in signature


def test_lowercased_metric_ignores_case():
    upper = [r.upper() for r in REFERENCES]
    (cased,), _ = bleu_bootstrap.paired_bootstrap(WORSE, {"upper": upper}, REFERENCES)
    (lowered,), signature = bleu_bootstrap.paired_bootstrap(
        WORSE, {"upper": upper}, REFERENCES, metric="bleu_lc"
    )
    assert cased.bleu < 10 and lowered.bleu == pytest.approx(100.0)
    assert "case:lc" in signature


def test_compare_runs_reads_the_translation_files(tmp_path, capsys):
    baseline = write_run(tmp_path, "base", WORSE)
    system = write_run(tmp_path, "better", REFERENCES)
    (comparison,), _ = bleu_bootstrap.compare_runs(baseline, [system])
    assert comparison.system == system and comparison.bleu == pytest.approx(100.0)
    table = bleu_bootstrap.markdown_table([comparison], baseline)
    assert f"`{system}` | 100.00 |" in table


def test_bad_inputs_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="system 'short' has 3 translations for 40 references"):
        bleu_bootstrap.paired_bootstrap(WORSE, {"short": WORSE[:3]}, REFERENCES)
    with pytest.raises(ValueError, match="metric='chrf' is not valid"):
        bleu_bootstrap.paired_bootstrap(WORSE, {"s": WORSE}, REFERENCES, metric="chrf")
    baseline = write_run(tmp_path, "base", WORSE)
    other_test_set = write_run(tmp_path, "other", WORSE, references=list(reversed(REFERENCES)))
    with pytest.raises(ValueError, match="different references"):
        bleu_bootstrap.compare_runs(baseline, [other_test_set])
    with pytest.raises(ValueError, match="test.greedy.txt' does not exist"):
        bleu_bootstrap.compare_runs(baseline, [baseline], decoding="greedy")
    assert os.path.isdir(baseline)


def test_sweep_section_pairs_each_variant_with_the_baseline_of_its_seed(tmp_path):
    def record(variant, seed, hypotheses=None, status="finished"):
        path = str(tmp_path / variant / f"seed_{seed}")
        if hypotheses is not None:
            write_run(tmp_path / variant, f"seed_{seed}", hypotheses)
        return RunRecord(variant=variant, seed=seed, path=path, status=status)

    runs = {
        "base": (record("base", 0, WORSE), record("base", 1, REFERENCES)),
        "better": (record("better", 0, REFERENCES), record("better", 1, WORSE)),
        # No translations (not a translation run) and unfinished runs are left out.
        "other": (record("other", 0), record("other", 1, REFERENCES, status="incomplete")),
    }
    lines = bleu_bootstrap.sweep_section(runs, "base")
    rows = [line for line in lines if line.startswith("| `")]
    assert len(rows) == 2
    assert rows[0].startswith("| `better` | 0 |") and "| +" in rows[0]
    assert rows[1].startswith("| `better` | 1 |") and "| -" in rows[1]
    assert (
        bleu_bootstrap.sweep_section({"base": runs["base"], "other": runs["other"]}, "base") == []
    )
