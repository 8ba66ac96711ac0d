"""Seeds until decided (sweep/sequential.py): boundaries against published values and an
independent computation, error rates by simulation, and the stopping rule end to end."""

from pathlib import Path

import numpy as np
import pytest
from kill_at_file import kill_when_file_appears
from scipy import stats
from test_nuisance_sweep import FAKE_CONFIG, MACHINE, tuned_sweep

from transformer_jax.report.report import write_report
from transformer_jax.sweep import run_sweep, sequential

ROUNDS = (4, 8, 12, 16, 20)
DESIGN = sequential.Design(ROUNDS)
# Lan-DeMets O'Brien-Fleming-type bounds, K = 5 equally spaced looks, two-sided alpha = 0.05
# (Jennison & Turnbull 2000, Table 7.6; gsDesign's sfLDOF gives the same).
PUBLISHED_OBF = (4.877, 3.357, 2.680, 2.290, 2.031)


def test_obrien_fleming_bounds_match_the_published_ones():
    np.testing.assert_allclose(DESIGN.two_sided, PUBLISHED_OBF, atol=1e-3)


@pytest.mark.parametrize("spending", sequential.SPENDING)
@pytest.mark.parametrize("sides", (1, 2))
def test_bounds_spend_alpha_by_an_independent_computation(spending, sides):
    """P(no crossing at any of 3 looks) under the null from scipy's multivariate normal CDF,
    whose correlation is sqrt(t_i / t_j): 1 - alpha(t) after each look."""
    t = np.array([1 / 3, 2 / 3, 1.0])
    c = sequential.z_boundaries(t, 0.05, spending, sides)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    for k in (2, 3):
        low = -c[:k] if sides == 2 else np.full(k, -np.inf)
        stay = stats.multivariate_normal(np.zeros(k), cov[:k, :k]).cdf(
            c[:k], lower_limit=low, rng=np.random.default_rng(0)
        )
        per_side = sequential.spent(t[k - 1], 0.05 / sides, spending)
        np.testing.assert_allclose(1 - stay, sides * per_side, atol=2e-4)


@pytest.mark.parametrize(
    "delta, wrong", [(0.0, "different"), (1.0, "equivalent"), (-1.0, "equivalent")]
)
def test_error_rates_hold_with_the_bounds_and_not_without(delta, wrong):
    """4,000 sequences of 20 paired normal deltas: the false verdict's rate stays within alpha
    plus three Monte Carlo standard errors; testing every look at the fixed-n level exceeds it."""
    limit = 0.05 + 3 * np.sqrt(0.05 * 0.95 / 4000)
    bounded = sequential.simulate(delta, 1.0, 1.0, DESIGN, sims=4000, seed=1)
    naive = sequential.simulate(delta, 1.0, 1.0, DESIGN, sims=4000, seed=1, bounded=False)
    assert bounded[wrong] <= limit
    assert naive[wrong] > limit


def test_a_zero_spread_look_decides_nothing():
    d = sequential.judge_look([0.2] * 4, 0, 0.5, DESIGN)
    assert d.verdict == sequential.UNDECIDED and np.isnan(d.low)


def test_the_t_bound_is_the_z_bound_at_its_nominal_level():
    t = sequential.t_boundary(np.array(2.031), 19)
    assert stats.t.sf(t, 19) == pytest.approx(stats.norm.sf(2.031))
    assert t > 2.031


def test_paired_t_and_tost_agree_with_statsmodels():
    """A look without the bounds' correction (one look: alpha spent at once) is the fixed-n
    paired t-test and TOST: statsmodels' ttost_paired decides the same."""
    from statsmodels.stats.weightstats import ttost_paired

    rng = np.random.default_rng(3)
    one = sequential.Design((12,))
    for _ in range(20):
        a, b = rng.normal(0.0, 1.0, 12), rng.normal(rng.uniform(-0.5, 0.5), 0.3, 12)
        d = sequential.judge_look(a - (a + b), 0, 0.4, one)
        p_tost = ttost_paired(a, a + b, -0.4, 0.4)[0]
        p_t = stats.ttest_rel(a, a + b).pvalue
        assert (d.verdict == sequential.DIFFERENT) == (p_t <= 0.05)
        if p_t > 0.05:
            assert (d.verdict == sequential.EQUIVALENT) == (p_tost <= 0.05)


FAKE_SEQUENTIAL_MAIN = """
import json, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
offset = float(args.get("config.fake.offset", "0.0"))
lr = float(args.get("config.train.learning_rate", "0.001"))


def train(workdir, seed, lr=lr):
    block = os.environ.get("FAKE_BLOCK_SEED")
    if block and seed == int(block) and "confirm" in workdir:
        open(os.environ["FAKE_BLOCK_FILE"], "w").close()
        time.sleep(600)  # killed by the test
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump({"seed": seed, "git_commit": "fake"}, f)
    # A per-seed draw shared by both cells (paired), plus the cell's offset and its own noise.
    noise = ((seed * 7919) % 13) / 13.0 - 0.5
    own = ((seed * 104729 + int(offset * 1000)) % 11) / 11.0 - 0.5
    loss = 1.0 + abs(lr - 1e-3) + noise + offset + 0.3 * own
    summary = {"status": "finished", "step": 10, "num_params": 100, "tokens_per_sec": 50.0,
               "wall_time_s": 0.1, "error": None,
               "metrics": {"validation": {"loss": loss}, "test": {"loss": loss}}}
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f)


if "runs" in args:  # a run group: each run's own seed and learning rate
    for name, run in json.loads(args["runs"]).items():
        train(os.path.join(args["workdir"], name), run["seed"], run.get("train.learning_rate", lr))
elif "seeds" in args:
    for seed in (int(s) for s in args["seeds"].split(",")):
        train(os.path.join(args["workdir"], f"seed_{seed}"), seed)
else:
    train(args["workdir"], int(args["config.seed"]))
"""


@pytest.fixture
def project(project):
    (project / "configs" / "fake.py").write_text(FAKE_CONFIG)
    (project / "fake_main.py").write_text(FAKE_SEQUENTIAL_MAIN)
    return project


def sequential_sweep(offset: float):
    return tuned_sweep(
        variants={"base": {}, "shifted": {"fake.offset": offset}},
        metrics=("test/loss",),
        confirm_seeds=tuple(range(10, 20)),
        confirm_rounds=(4, 7, 10),
        equivalence_margins={"test/loss": 0.1},
    )


def _confirm_seeds(workdir, variant):
    return sorted(int(p.name[5:]) for p in workdir.glob(f"{variant}/confirm/*/seed_*"))


def test_a_clear_difference_stops_early_and_a_tie_runs_on(project):
    clear = project / "clear"
    run_sweep(
        sequential_sweep(0.5),
        "experiments/s.py",
        str(clear),
        main_module="fake_main",
        machine=MACHINE,
    )
    # Decided different at the second look (its first t bound is 14.0 at 3 df).
    assert _confirm_seeds(clear, "shifted") == list(range(10, 17))
    report = Path(write_report(str(clear))).read_text()
    assert "| `test/loss` | shifted − base | – | 7 | 2 |" in report
    assert "**different**" in report
    close = project / "close"
    run_sweep(
        sequential_sweep(0.06),
        "experiments/s.py",
        str(close),
        main_module="fake_main",
        machine=MACHINE,
    )
    assert _confirm_seeds(close, "base") == list(range(10, 20))


@pytest.mark.slow  # two sweep processes (~15 s on two loaded cores)
def test_resumed_after_a_kill_between_rounds_reports_the_same(project):
    """The sweep killed (SIGKILL, its process group) when the second round's first run starts,
    rerun, gives the same sequential verdicts as one launch."""
    import os
    import subprocess
    import sys

    (project / "experiments" / "s.py").write_text(
        "from test_sequential import sequential_sweep\n\n\ndef get_sweep():\n"
        "    return sequential_sweep(0.5)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.environ["PYTHONPATH"], os.path.dirname(__file__)]),
    }
    command = [
        sys.executable,
        "-m",
        "transformer_jax.sweep",
        "--sweep=experiments/s.py",
        "--workdir=killed",
        "--main_module=fake_main",
        "--allow_dirty",
    ]
    block = project / "blocked"
    block_env = {**env, "FAKE_BLOCK_SEED": "14", "FAKE_BLOCK_FILE": str(block)}
    kill_when_file_appears(command, block_env, block, timeout_s=60)
    assert 16 not in _confirm_seeds(project / "killed", "shifted")  # the second round cut short
    subprocess.run(command, env=env, check=True, capture_output=True)
    run_sweep(
        sequential_sweep(0.5),
        "experiments/s.py",
        str(project / "once"),
        main_module="fake_main",
        machine=MACHINE,
    )
    write_report(str(project / "once"))
    for name in ("sequential.csv", "results.csv"):
        assert (project / "killed" / name).read_text() == (project / "once" / name).read_text()


def test_plan_reads_the_observed_paired_deltas_and_simulates_the_design(project):
    from transformer_jax.report import plan

    workdir = project / "clear"
    run_sweep(
        sequential_sweep(0.5),
        "experiments/s.py",
        str(workdir),
        main_module="fake_main",
        machine=MACHINE,
    )
    write_report(str(workdir))
    row = next(line for line in (workdir / "sequential.csv").read_text().splitlines()[1:])
    fields = row.split(",")
    n, diff = int(fields[4]), float(fields[6])
    text = plan.plan(str(workdir), None, 0.0)
    line = next(line for line in text.splitlines() if "shifted − base" in line)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert int(cells[1]) == n == 7
    assert float(cells[2]) == pytest.approx(diff, abs=1e-4)
    # A delta of 0.5 at this sd: the design ends different nearly always.
    assert cells[4] in ("99%", "100%")
    # Nothing is written by a plan.
    before = sorted(p.name for p in workdir.iterdir())
    plan.plan(str(workdir), None, 0.02)
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_plan_of_a_fresh_workdir_uses_the_assumed_sd(project, tmp_path):
    from transformer_jax.report import plan

    sweep_file = project / "experiments" / "s.py"
    sweep_file.parent.mkdir(exist_ok=True)
    sweep_file.write_text(
        "from test_sequential import sequential_sweep\n"
        "def get_sweep():\n    return sequential_sweep(0.0)\n"
    )
    with pytest.raises(ValueError, match="give --sweep"):
        plan.plan(str(tmp_path / "fresh"), None, 0.02)
    # An sd far above the margin: equivalence is out of reach, so nothing stops the false
    # "different" verdicts but the bounds.
    text = plan.plan(str(tmp_path / "fresh"), str(sweep_file), 2.0)
    assert "No paired sd observed yet for 1" in text
    zero = next(line for line in text.splitlines() if "Δ = 0 |" in line)
    # At delta 0 the design's false "different" rate is about alpha.
    assert zero.split("|")[5].strip() in ("4%", "5%", "6%")
    assert not (tmp_path / "fresh").exists()
