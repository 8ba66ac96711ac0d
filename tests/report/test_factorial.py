"""Factorial analysis against hand-computed examples: simple effects paired by seed within each
cell, the interaction (difference of differences) with its CI, marginal effects only in a
balanced design, Holm's correction over each table, and the split factor."""

import math

import pytest

from transformer_jax.report import factorial, stats, summary
from transformer_jax.report.factorial import Design, DesignFactor
from transformer_jax.report.factorial_tables import cells_table, effects_csv, effects_table
from transformer_jax.sweep import Factor, SplitFactor, Sweep
from transformer_jax.sweep_dir import RunRecord

T_975_2 = 4.302653  # two-sided 95% t quantile, 2 degrees of freedom

# results/attention_scale/runs.csv, test/seq_accuracy per seed 0, 1, 2.
SCALE_RUNS = {
    "sqrt_dk": (0.960, 0.970, 0.962),
    "none": (0.864, 0.862, 0.858),
    "learned": (0.964, 0.980, 0.968),
    "dk64_sqrt_dk": (0.980, 0.982, 0.988),
    "dk64_none": (0.142, 0.146, 0.302),
}


def scale_sweep(cells=None):
    return Sweep(
        config="configs/ablation.py",
        factors=(
            Factor("d_k", {"dk16": {}, "dk64": {"model.attention.num_heads": 1}}, "", False),
            Factor(
                "scale",
                {
                    "sqrt_dk": {},
                    "none": {"model.attention.scale": "none"},
                    "learned": {"model.attention.scale": "learned"},
                },
            ),
        ),
        cells=cells
        or [{}, {"scale": "none"}, {"scale": "learned"}, {"d_k": "dk64"}, ("dk64", "none")],
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy",),
    )


def rows_of(sweep, values, key="test/seq_accuracy"):
    """Summaries of finished runs whose metric(s) are values[variant][seed]."""
    runs = {}
    for name in sweep.variants:
        records = []
        for seed in sweep.seeds:
            v = values.get(name)
            if v is None:
                records.append(RunRecord(name, seed, f"/x/{name}/{seed}", "missing"))
                continue
            metrics = {}
            per_metric = v if isinstance(v, dict) else {key: v}
            for metric, seq in per_metric.items():
                split, _, k = metric.partition("/")
                metrics.setdefault(split, {})[k] = seq[seed]
            records.append(RunRecord(name, seed, f"/x/{name}/{seed}", "finished", 500, metrics))
        runs[name] = tuple(records)
    return summary.summarize(sweep, runs)


def by_label(table):
    return {(c.label, c.held_fixed): c for c in table.comparisons}


def test_simple_effects_are_paired_within_each_cell():
    sweep = scale_sweep()
    (table,) = factorial.metric_tables(sweep, rows_of(sweep, SCALE_RUNS))
    c = by_label(table)
    # The issue's example: dk64_none against dk64_sqrt_dk (d_k = 64), not against sqrt_dk.
    at64 = c[("scale: none − sqrt_dk", "d_k=dk64")]
    diffs = [-0.838, -0.836, -0.686]  # dk64_none - dk64_sqrt_dk per seed
    sd = stats.sample_std(diffs)
    assert at64.diff.mean == pytest.approx(-0.78667, abs=1e-5)
    assert at64.diff.low == pytest.approx(-0.78667 - T_975_2 * sd / math.sqrt(3), abs=1e-5)
    assert at64.terms == ((1.0, "dk64_none"), (-1.0, "dk64_sqrt_dk"))
    at16 = c[("scale: none − sqrt_dk", "d_k=dk16")]
    assert at16.diff.mean == pytest.approx((-0.096 - 0.108 - 0.104) / 3)
    assert at16.terms == ((1.0, "none"), (-1.0, "sqrt_dk"))
    assert c[("d_k: dk64 − dk16", "scale=none")].diff.mean == pytest.approx(
        ((0.142 - 0.864) + (0.146 - 0.862) + (0.302 - 0.858)) / 3
    )
    # learned exists at d_k = 16 only: one simple effect, no interaction with d_k.
    assert [k for k in c if "learned" in k[0]] == [("scale: learned − sqrt_dk", "d_k=dk16")]
    assert [k[0] for k in c if "×" in k[0]] == [
        "d_k × scale: (none − sqrt_dk) at d_k=dk64 minus at d_k=dk16"
    ]


def test_interaction_ci_hand_computed():
    sweep = scale_sweep()
    (table,) = factorial.metric_tables(sweep, rows_of(sweep, SCALE_RUNS))
    (inter,) = [c for c in table.comparisons if c.kind == factorial.INTERACTION]
    # Per seed (dk64_none - dk64_sqrt_dk) - (none - sqrt_dk): -0.742, -0.728, -0.582.
    per_seed = [-0.838 + 0.096, -0.836 + 0.108, -0.686 + 0.104]
    m = sum(per_seed) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in per_seed) / 2)
    half = T_975_2 * sd / math.sqrt(3)
    assert m == pytest.approx(-0.684)
    assert inter.diff.mean == pytest.approx(m)
    assert (inter.diff.low, inter.diff.high) == pytest.approx((m - half, m + half), abs=1e-6)
    assert inter.diff.low == pytest.approx(-0.904, abs=5e-4)
    assert inter.diff.high == pytest.approx(-0.464, abs=5e-4)
    assert inter.held_fixed == ""
    assert dict((n, c) for c, n in inter.terms) == {
        "dk64_none": 1.0,
        "dk64_sqrt_dk": -1.0,
        "none": -1.0,
        "sqrt_dk": 1.0,
    }


def test_holm_runs_over_each_tables_family():
    sweep = scale_sweep()
    (table,) = factorial.metric_tables(sweep, rows_of(sweep, SCALE_RUNS))
    p = [c.diff.p_value for c in table.comparisons]
    assert len(p) == 6 and not any(math.isnan(x) for x in p)
    assert [c.p_holm for c in table.comparisons] == pytest.approx(stats.holm(p))
    text = effects_table(table)
    assert "family of 6 comparisons" in text
    # none - sqrt_dk at d_k=16 (t = 24.3, df 2) survives; learned - sqrt_dk does not.
    assert "-0.103 [-0.118, -0.087]*† (n=3)" in text
    row = next(line for line in text.splitlines() if line.startswith("| scale: learned"))
    assert "†" not in row


def _grid_design(values):
    return Design(
        (DesignFactor("a", ("a0", "a1"), "a0"), DesignFactor("b", ("b0", "b1"), "b0")), values
    )


def test_marginal_effects_only_in_a_balanced_design():
    values = {
        ("a0", "b0"): {0: 1.0, 1: 2.0, 2: 3.0},
        ("a1", "b0"): {0: 1.1, 1: 2.3, 2: 3.2},  # a: +0.1, +0.3, +0.2 at b0
        ("a0", "b1"): {0: 1.0, 1: 1.0, 2: 1.0},
        ("a1", "b1"): {0: 1.5, 1: 1.4, 2: 1.6},  # a: +0.5, +0.4, +0.6 at b1
    }
    comparisons = factorial.analyze(_grid_design(values))
    marginal = {c.effect: c for c in comparisons if c.kind == factorial.MARGINAL}
    # a averaged over b per seed: (0.1 + 0.5) / 2, (0.3 + 0.4) / 2, (0.2 + 0.6) / 2.
    assert marginal["a1 − a0"].diff.mean == pytest.approx((0.3 + 0.35 + 0.4) / 3)
    assert marginal["a1 − a0"].held_fixed == "averaged over b"
    expected = stats.paired_contrast(
        [(0.5, values[("a1", "b0")]), (-0.5, values[("a0", "b0")])]
        + [(0.5, values[("a1", "b1")]), (-0.5, values[("a0", "b1")])]
    )
    assert marginal["a1 − a0"].diff == expected
    (inter,) = [c for c in comparisons if c.kind == factorial.INTERACTION]
    assert inter.diff.mean == pytest.approx((0.4 + 0.1 + 0.4) / 3)  # b1 minus b0 effect of a
    # Without the (a1, b1) cell: no interaction and no marginal effect (unbalanced).
    del values[("a1", "b1")]
    kinds = {c.kind for c in factorial.analyze(_grid_design(values))}
    assert kinds == {factorial.SIMPLE}


def test_split_factor_pairs_two_splits_of_the_same_runs():
    sweep = Sweep(
        config="configs/ablation.py",
        factors=(
            Factor("encoding", {"sin": {}, "rotary": {"model.positional.kind": "rotary"}}),
            SplitFactor("length", {"short": "test", "long": "test_long"}),
        ),
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy", "test_long/seq_accuracy", "test/loss"),
    )
    values = {
        "sin": {
            "test/seq_accuracy": (0.96, 0.97, 0.96),
            "test_long/seq_accuracy": (0.01, 0.00, 0.00),
            "test/loss": (0.1, 0.1, 0.1),
        },
        "rotary": {
            "test/seq_accuracy": (0.83, 0.85, 0.72),
            "test_long/seq_accuracy": (0.06, 0.04, 0.02),
            "test/loss": (0.2, 0.1, 0.3),
        },
    }
    rows = rows_of(sweep, values)
    tables = factorial.metric_tables(sweep, rows)
    assert [t.title for t in tables] == ["seq_accuracy", "test/loss"]
    grouped = tables[0]
    assert grouped.columns == {"short": "test/seq_accuracy", "long": "test_long/seq_accuracy"}
    c = by_label(grouped)
    inter = c[("encoding × length: (long − short) at encoding=rotary minus at encoding=sin", "")]
    # Per seed (rotary long - rotary short) - (sin long - sin short): 0.18, 0.16, 0.26.
    per_seed = [(0.06 - 0.83) - (0.01 - 0.96), (0.04 - 0.85) - (0.0 - 0.97)]
    per_seed.append((0.02 - 0.72) - (0.0 - 0.96))
    assert per_seed == pytest.approx([0.18, 0.16, 0.26])
    assert inter.diff.mean == pytest.approx(0.2)
    assert inter.diff == stats.paired_contrast(
        [(1, {0: 0.06, 1: 0.04, 2: 0.02}), (-1, {0: 0.83, 1: 0.85, 2: 0.72})]
        + [(-1, {0: 0.01, 1: 0.0, 2: 0.0}), (1, {0: 0.96, 1: 0.97, 2: 0.96})]
    )
    assert inter.terms[0] == (1.0, "rotary@long")
    assert ("encoding: rotary − sin", "length=long") in c
    assert ("length: long − short", "averaged over encoding") in c  # 2x2 grid: balanced
    assert [x.held_fixed for x in tables[1].comparisons] == [""]  # loss: encoding only
    cells = cells_table(sweep, rows, grouped)
    assert "| short (`test/seq_accuracy`) | long (`test_long/seq_accuracy`) |" in cells
    assert "| **sin** (reference) | sin | 0.963 ± 0.006 (n=3) | 0.003 ± 0.006 (n=3) |" in cells


def test_untrained_cells_and_variants_beside_the_grid():
    sweep = Sweep(
        config="configs/ablation.py",
        factors=(
            Factor("warmup", {"on": {}, "off": {"train.warmup_steps": 0}}),
            Factor("depth", {"d2": {}, "d6": {"model.num_encoder_layers": 6}}),
        ),
        variants={"extra": {"model.d_model": 32}},
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
    )
    assert list(sweep.variants) == ["on_d2", "on_d6", "off_d2", "off_d6", "extra"]
    assert sweep.baseline == "on_d2" and sweep.cell_of("extra") is None
    values = {"on_d2": (0.5, 0.6), "off_d2": (0.4, 0.6), "extra": (0.7, 0.9)}
    (table,) = factorial.metric_tables(sweep, rows_of(sweep, values))
    flat = [c for c in table.comparisons if c.kind == factorial.FLAT]
    assert [(c.label, c.diff.mean) for c in flat] == [("extra − on_d2", pytest.approx(0.25))]
    tested = [c for c in table.comparisons if c.diff.n > 0]
    assert [c.label for c in tested] == ["warmup: off − on", "extra − on_d2"]
    text = effects_table(table)
    assert "Not estimable yet: 6 more comparisons need a cell without finished runs" in text
    assert "(`on_d6`, `off_d6`)" in text
    csv_text = effects_csv([table])
    assert csv_text.splitlines()[0].startswith("metric,kind,factors,effect,held_fixed,diff")
    assert len(csv_text.splitlines()) == 1 + len(table.comparisons)
