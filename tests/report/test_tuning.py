"""The choice of nuisance settings (report/tuning.py): made on validation, blind to test."""

import math

import pytest

from transformer_jax.report import summary, tuning
from transformer_jax.sweep import Sweep
from transformer_jax.sweep.nuisance import on_edge, settings
from transformer_jax.sweep_dir import RunRecord

LRS = (1e-3, 3e-3, 1e-2)
LR, WARMUP = "train.learning_rate", "train.warmup_steps"


def make_sweep(**changes) -> Sweep:
    kwargs = dict(
        config="configs/fake.py",
        variants={"a": {}, "b": {"model.x": 1}},
        seeds=(0, 1, 2),
        metrics=("test/seq_accuracy",),
        baseline="a",
        nuisance={"train.learning_rate": LRS},
        select_on="validation/loss",
        select_mode="min",
        nuisance_default={"train.learning_rate": 1e-3},
    )
    kwargs.update(changes)
    return Sweep(**kwargs)


def make_runs(sweep, validation, test):
    """run variant -> records from validation / test: (variant, lr, seed) -> value."""
    return make_runs_by_setting(
        sweep,
        lambda variant, setting, seed: validation(variant, setting[LR], seed),
        lambda variant, setting, seed: test(variant, setting[LR], seed),
    )


def make_runs_by_setting(sweep, validation, test):
    """run variant -> records from validation / test: (variant, setting, seed) -> value."""
    runs = {}
    for name in sweep.run_variants:
        variant, setting = name.split("/")
        values = sweep.settings[setting]
        runs[name] = tuple(
            RunRecord(
                name,
                seed,
                f"/runs/{name}/seed_{seed}",
                "finished",
                metrics={
                    "validation": {"loss": validation(variant, values, seed)},
                    "test": {"seq_accuracy": test(variant, values, seed)},
                },
            )
            for seed in sweep.seeds
        )
    return runs


def validation_loss(variant, lr, seed):
    best = 3e-3 if variant == "a" else 1e-2
    return abs(math.log10(lr / best)) + 0.1 * seed


def honest_test(variant, lr, seed):
    return 1.0 - validation_loss(variant, lr, seed)


def poisoned_test(variant, lr, seed):
    # The test metric rewards the setting validation likes least, or is not a number at all.
    return math.nan if lr == 3e-3 else 10.0 * validation_loss(variant, lr, seed)


@pytest.mark.parametrize("per", ["cell", "seed"])
def test_poisoning_the_test_metric_changes_no_choice(per):
    sweep = make_sweep(select_per=per)
    honest = tuning.select(sweep, make_runs(sweep, validation_loss, honest_test))
    poisoned = tuning.select(sweep, make_runs(sweep, validation_loss, poisoned_test))
    lr = {
        v: {s: sweep.settings[c]["train.learning_rate"] for s, c in ch.items()}
        for v, ch in poisoned.chosen.items()
    }
    assert lr == {"a": dict.fromkeys((0, 1, 2), 3e-3), "b": dict.fromkeys((0, 1, 2), 1e-2)}
    assert poisoned.chosen == honest.chosen
    # The test values reported are those of the chosen runs, poisoned or not.
    assert all(math.isnan(r.metric("test/seq_accuracy")) for r in poisoned.tuned["a"])
    # Choosing on test would have picked otherwise: the test above can fail.
    on_test = make_sweep(select_per=per, select_on="held/seq_accuracy", select_mode="max")
    runs = {
        name: tuple(
            RunRecord(
                r.variant,
                r.seed,
                r.path,
                r.status,
                metrics={"held": r.metrics["test"], **r.metrics},
            )
            for r in records
        )
        for name, records in make_runs(sweep, validation_loss, poisoned_test).items()
    }
    assert tuning.select(on_test, runs).chosen != honest.chosen


def test_per_seed_and_per_cell_choices_differ_where_seeds_disagree():
    sweep_cell, sweep_seed = make_sweep(), make_sweep(select_per="seed")

    def validation(variant, lr, seed):
        # Seed 2 of "a" prefers 1e-2 strongly; the mean over seeds still prefers 3e-3.
        if variant == "a" and seed == 2:
            return 0.0 if lr == 1e-2 else 1.0
        return validation_loss(variant, lr, seed)

    runs = make_runs(sweep_cell, validation, honest_test)
    cell = tuning.select(sweep_cell, runs).chosen["a"]
    seed = tuning.select(sweep_seed, runs).chosen["a"]
    assert set(cell.values()) == {"learning_rate-0.003"}
    assert seed == {0: "learning_rate-0.003", 1: "learning_rate-0.003", 2: "learning_rate-0.01"}


def test_a_diverged_run_scores_worst_and_an_unfinished_one_defers_the_choice():
    sweep = make_sweep()
    runs = make_runs(sweep, validation_loss, honest_test)
    best = "a/learning_rate-0.003"
    runs[best] = (RunRecord(best, 0, "/x", "diverged"),) + runs[best][1:]
    assert tuning.select(sweep, runs).chosen["a"] == dict.fromkeys((0, 1, 2), "learning_rate-0.001")
    runs[best] = (RunRecord(best, 0, "/x", "incomplete"),) + runs[best][1:]
    chosen = tuning.select(sweep, runs)
    assert chosen.chosen["a"] == {}
    assert [r.status for r in chosen.tuned["a"]] == ["missing"] * 3
    # The untuned view is the default setting's runs, whatever the choice.
    assert [r.path for r in chosen.untuned["a"]] == [
        f"/runs/a/learning_rate-0.001/seed_{s}" for s in (0, 1, 2)
    ]


def test_edge_of_grid():
    grid = {"train.learning_rate": LRS, "train.warmup_steps": (0, 50)}
    assert on_edge(grid, {"train.learning_rate": 3e-3, "train.warmup_steps": 50}) == [
        "train.warmup_steps"
    ]
    assert on_edge(grid, {"train.learning_rate": 1e-3, "train.warmup_steps": 50}) == list(grid)
    # No warmup is the smallest there is: not an edge to widen past.
    assert on_edge(grid, {"train.learning_rate": 1e-2, "train.warmup_steps": 0}) == [
        "train.learning_rate"
    ]
    assert list(settings(grid))[:2] == [
        "learning_rate-0.001_warmup_steps-0",
        "learning_rate-0.001_warmup_steps-50",
    ]


def test_a_grid_value_with_an_exponent_names_a_directory_that_reads_back():
    grid = {"train.grad_clip_norm": (1e30, 1.5e-05, 2.0), "train.eps": (1e-09,)}
    names = list(settings(grid))
    assert names == [
        "grad_clip_norm-1e30_eps-1e-09",
        "grad_clip_norm-1.5e-05_eps-1e-09",
        "grad_clip_norm-2.0_eps-1e-09",
    ]
    for name, setting in settings(grid).items():
        value = float(name.split("_eps")[0].removeprefix("grad_clip_norm-"))
        assert value == setting["train.grad_clip_norm"]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"select_on": "test/loss"}, "is a test split"),
        ({"select_on": "test_long/loss"}, "is a test split"),
        ({"select_on": ""}, "needs the validation metric"),
        ({"select_mode": "best"}, "must be 'max'"),
        ({"select_per": "run"}, "must be 'cell'"),
        ({"variants": {"a": {"train.learning_rate": 1.0}}}, "which nuisance tunes"),
        ({"nuisance": {"train.learning_rate": (1e-3,)}}, "at least two values"),
        ({"nuisance_default": {"train.learning_rate": 5e-3}}, "lacks the base config's value"),
        ({"confirm_seeds": (2, 10)}, r"\[2\] are also among seeds"),
        ({"confirm_seeds": (10, 10)}, "contains duplicates"),
        ({"confirm_seeds": (10, -1)}, r"confirm_seeds = \(10, -1\) holds -1; valid seeds"),
        ({"confirm_seeds": 10}, "must be a tuple of ints"),
        ({"confirm_seeds": (10,), "select_per": "seed"}, "needs select_per='cell'"),
        (
            {"confirm_seeds": (10,), "nuisance": {}, "select_on": "", "select_mode": ""}
            | {"nuisance_default": {}},
            "needs nuisance",
        ),
    ],
)
def test_bad_nuisance_declarations_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        make_sweep(**changes)


def test_round_trip_through_sweep_json():
    sweep = make_sweep(select_per="seed")
    assert Sweep.from_dict(sweep.to_dict()) == sweep
    confirmed = make_sweep(confirm_seeds=(10, 11))
    assert Sweep.from_dict(confirmed.to_dict()) == confirmed
    plain = Sweep.from_dict(
        make_sweep(nuisance={}, select_on="", select_mode="", nuisance_default={}).to_dict()
    )
    assert "nuisance" not in plain.to_dict() and plain.run_variants == plain.variants


def test_a_selection_metric_no_run_reports_is_noted_and_chooses_nothing():
    sweep = make_sweep(select_on="validation/seq_accuracy", select_mode="max")
    chosen = tuning.select(sweep, make_runs(sweep, validation_loss, honest_test))
    assert chosen.chosen == {"a": {}, "b": {}}
    assert len(chosen.notes) == 1 and "report the splits test, validation" in chosen.notes[0]


def test_the_isolation_plot_names_its_axes_and_every_variant(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from transformer_jax.report import plots

    saved = []
    original = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, path, **kw: (saved.append(fig), original(fig, path, **kw))
    )
    sweep = make_sweep()
    key, curves = tuning.isolation_curves(sweep, make_runs(sweep, validation_loss, honest_test))
    assert key == "train.learning_rate"
    # Per learning rate, the mean over seeds 0-2 (0.1 * mean seed = 0.1).
    xs, ys = zip(*curves["a"], strict=True)
    assert xs == LRS
    assert ys == pytest.approx([math.log10(3) + 0.1, 0.1, math.log10(10 / 3) + 0.1])
    path = tmp_path / "isolation.png"
    assert plots.plot_isolation(
        curves, {"a": "a", "b": "b"}, key, "validation/loss", "t", str(path)
    )
    assert path.stat().st_size > 0
    (ax,) = saved[0].axes
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_xscale()) == (key, "validation/loss", "log")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert not plots.plot_isolation({"a": []}, {"a": "a"}, key, "y", "t", str(tmp_path / "no.png"))


def test_best_at_each_value_of_a_second_key_is_chosen_on_validation_alone():
    grid = {"train.learning_rate": LRS, "train.warmup_steps": (0, 50)}
    sweep = make_sweep(nuisance=grid, nuisance_default={LR: 1e-3, WARMUP: 50})

    def validation(variant, setting, seed):
        # "b" needs warmup: without it only the smallest rate trains, and worse than with it.
        lr, warmup = setting[LR], setting[WARMUP]
        if variant == "b" and warmup == 0:
            return 0.5 + 0.1 * seed if lr == 1e-3 else 5.0
        return abs(math.log10(lr / 3e-3)) + 0.1 * seed + (0.01 if warmup == 0 else 0.0)

    def poisoned(variant, setting, seed):
        return 10.0 * validation(variant, setting, seed)  # rewards what validation likes least

    runs = make_runs_by_setting(sweep, validation, poisoned)
    best = tuning.best_at_each_value(sweep, runs)
    assert list(best) == [WARMUP]  # the learning rate is the plots' axis, not a question here
    lr = {v: {w: sweep.settings[s][LR] for w, s in ch.items()} for v, ch in best[WARMUP].items()}
    assert lr == {"a": {0: 3e-3, 50: 3e-3}, "b": {0: 1e-3, 50: 3e-3}}
    lines = tuning.best_at_each_value_lines(sweep, runs)
    assert "### Each variant's best at each value of `warmup_steps`" in lines
    row_b = next(line for line in lines if line.startswith("| b |"))
    # b without warmup: rate 1e-3, validation mean 0.6, test (poisoned) mean 6.0; with: 3e-3.
    assert (
        row_b == "| b | learning_rate=0.001 | 0.600 | 6.000 | learning_rate=0.003 | 0.100 | 1.000 |"
    )
    # One nuisance key: nothing to add.
    assert (
        tuning.best_at_each_value_lines(
            make_sweep(), make_runs(make_sweep(), validation_loss, honest_test)
        )
        == []
    )


# Validation losses by (variant, learning rate) per seed 0, 1, 2. a: 3e-3 is best (mean 1.1,
# std 0.1), 1e-3 runner-up (mean 1.1333, std 0.0764): 0.0333 apart, less than the larger std
# 0.1, a near tie. b: 1e-2 best (mean 0.6), 3e-3 runner-up (mean 1.0), 0.4 apart: no tie.
TIE_VALIDATION = {
    ("a", 1e-3): (1.05, 1.15, 1.20),
    ("a", 3e-3): (1.00, 1.20, 1.10),
    ("a", 1e-2): (2.0, 2.0, 2.0),
    ("b", 1e-3): (3.0, 3.0, 3.0),
    ("b", 3e-3): (0.9, 1.0, 1.1),
    ("b", 1e-2): (0.5, 0.6, 0.7),
}


SCIPY_T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)


def tie_test(variant, lr, seed):
    return 10 * lr + (0.5 + 0.02 * seed if variant == "b" else 0.01 * seed**2)


def test_runner_up_and_near_tie_against_a_hand_computation():
    sweep = make_sweep()
    runs = make_runs(sweep, lambda v, lr, s: TIE_VALIDATION[v, lr][s], tie_test)
    chosen = tuning.select(sweep, runs)
    a, b = chosen.runner_up["a"], chosen.runner_up["b"]
    assert (a.setting, b.setting) == ("learning_rate-0.001", "learning_rate-0.003")
    assert a.best_mean == pytest.approx(1.1) and a.runner_up_mean == pytest.approx(3.4 / 3)
    assert a.spread == pytest.approx(0.1)  # max(0.1, std(1.05, 1.15, 1.20) = 0.0764)
    assert a.near_tie and not b.near_tie
    assert b.spread == pytest.approx(0.1) and b.runner_up_mean == pytest.approx(1.0)

    rows = summary.summarize(sweep, chosen.tuned)
    untuned = summary.summarize(sweep, chosen.untuned)
    lines = tuning.section(sweep, chosen, rows, untuned)
    # b − a with each at its runner-up (b at 3e-3, a at 1e-3), paired by seed, by hand.
    diffs = [tie_test("b", 3e-3, s) - tie_test("a", 1e-3, s) for s in sweep.seeds]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    half = SCIPY_T_975_DF2 * sd / math.sqrt(3)
    row = next(line for line in lines if "b − a" in line).split(" | ")
    # One comparison in its family: Holm's correction leaves it significant (†).
    assert row[5] == f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]*† (n=3)"
    assert row[6] == "≈ a"
    table = next(line for line in lines if line.startswith("| a |")).split(" | ")
    assert table[3:5] == ["learning_rate=0.001", "1.100 / 1.133 (0.1000) ≈"]
