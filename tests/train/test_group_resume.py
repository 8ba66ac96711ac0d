"""A resumed group is the program it was: when some members of a tuned cell's run group have
ended (one diverged, one whose final save landed before a kill, one whose save met a full
disk), the sweep relaunches the whole group, the ended members holding their lanes untouched,
and every member's metrics.jsonl equals the uninterrupted group's line for line, bit for bit
(the same XLA program; a group of only the members left is a smaller one, whose batched matmuls
round otherwise).

Each test trains the sweep's groups as its runner forms them (sweep/runner.py `launches` over
the selected runs, done or not), with the trainer in this process (`main --runs` parsed by
transformer_jax.main); an interruption lands at a checkpoint save chosen by a hook, never at a
time.
"""

import errno
import json
import sys

import pytest
from absl import flags as absl_flags
from test_seed_group import _Killed, copy_config
from train_fixtures import read_metrics

from transformer_jax import run_dir, sweep_dir
from transformer_jax.sweep import Sweep, runner
from transformer_jax.train.checkpoint import Checkpointer
from transformer_jax.train.seed_group import train_run_group

STEPS = 10
RATES = (0.5, 0.25, 1e9)  # the last one diverges at the first train line (step 5)
SPEC = "configs/algorithmic.py:copy"
SWEEP = Sweep(
    config="configs/algorithmic.py",
    config_arg="copy",
    variants={"base": {}},
    seeds=(0,),
    metrics=("test/loss",),
    baseline="base",
    nuisance={"train.learning_rate": RATES},
    select_on="validation/loss",
    select_mode="min",
)
NAMES = [f"base/learning_rate-{rate}/seed_0" for rate in RATES]  # the group's lanes, in order


def _config(data_dir):
    config = copy_config(data_dir, steps=STEPS)
    config.train.eval_every = 5
    config.data.num_test_long = 0
    return config


def _train_as_the_sweep_does(workdir, config) -> list[list[str]]:
    """One launch of the sweep over `workdir`: its runs not done, in the groups the runner
    forms, each trained here as its command says. Returns each group's members that trained."""
    stage = runner.plan(SWEEP, str(workdir), SPEC)
    todo = [
        s
        for s in stage
        if sweep_dir.read_run(str(workdir), s.variant, s.seed).status not in sweep_dir.DONE_STATUSES
    ]
    trained = []
    for unit in runner.launches(SWEEP, str(workdir), todo, SPEC, runner.DEFAULT_MAIN, True, stage):
        flags = dict(arg[2:].split("=", 1) for arg in unit.argv[3:])
        if "runs" in flags:
            # Imported here: transformer_jax.main defines absl flags at import, which would
            # collide at collection with another test module's (benchmarks) on the same worker.
            if "transformer_jax.main" not in sys.modules:
                for name in ("config", "workdir"):  # a benchmark module's flags of those names
                    if name in absl_flags.FLAGS:
                        delattr(absl_flags.FLAGS, name)
            from transformer_jax.main import _parse_runs

            configs, workdirs = _parse_runs(flags["runs"], config, flags["workdir"])
        else:  # one run: --config.seed and --config.train.learning_rate
            member = config.copy_and_resolve_references()
            member.seed = int(flags["config.seed"])
            member.train.learning_rate = float(flags["config.train.learning_rate"])
            configs, workdirs = [member], [flags["workdir"]]
        train_run_group(configs, workdirs)
        trained.append([str(r.path)[len(str(workdir)) + 1 :] for r in unit.runs])
    return trained


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted group: (its config, its sweep directory)."""
    root = tmp_path_factory.mktemp("group_resume")
    config = _config(root / "tfds")
    assert _train_as_the_sweep_does(root / "sweep", config) == [NAMES]
    statuses = [run_dir.read_summary(root / "sweep" / name).status for name in NAMES]
    assert statuses == ["finished", "finished", "diverged"]
    return config, root / "sweep"


def _interrupted_at(monkeypatch, member: int, step: int, error):
    """Checkpointer.save raising `error(checkpointer, step)` at `step` of member `member`."""
    save = Checkpointer.save

    def interrupted(self, at, *args, **kwargs):
        if at == step and f"/{NAMES[member]}/" in f"{self.directory}/":
            raise error(self, at)
        return save(self, at, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "save", interrupted)


def _killed(checkpointer, step):
    return _Killed()  # as by kill -9: nothing of this process runs on


def _full_disk(checkpointer, step):
    cause = OSError(errno.ENOSPC, "No space left on device")
    return checkpointer._save_failed(step, cause)


def _files(workdir, name):
    return {f: (workdir / name / f).read_bytes() for f in ("metrics.jsonl", "summary.json")}


def _resume_and_compare(reference, workdir, held: list[int]):
    """Reruns the sweep; the members `held` ended before and are left as they were, the others
    train in the whole group, and every member's metrics equal the uninterrupted group's."""
    config, reference_dir = reference
    before = {i: _files(workdir, NAMES[i]) for i in held}
    assert _train_as_the_sweep_does(workdir, config) == [
        [name for i, name in enumerate(NAMES) if i not in held]
    ]
    for name in NAMES:
        assert read_metrics(workdir / name) == read_metrics(reference_dir / name), name
        reference_summary = run_dir.read_summary(reference_dir / name)
        summary = run_dir.read_summary(workdir / name)
        assert (summary.status, summary.step, summary.metrics) == (
            reference_summary.status,
            reference_summary.step,
            reference_summary.metrics,
        )
    for i in held:
        assert _files(workdir, NAMES[i]) == before[i], f"{NAMES[i]} was written again"


def test_a_group_with_a_diverged_member_resumes_as_the_whole_group(
    reference, tmp_path, monkeypatch
):
    """The third rate diverged at step 5; the group is killed at the second member's step-5
    save, after the first member's: the rerun trains the first two in the group of three."""
    config, _ = reference
    _interrupted_at(monkeypatch, 1, 5, _killed)
    with pytest.raises(_Killed):
        _train_as_the_sweep_does(tmp_path, config)
    monkeypatch.undo()
    assert run_dir.read_summary(tmp_path / NAMES[2]).status == "diverged"
    _resume_and_compare(reference, tmp_path, held=[2])


@pytest.mark.slow  # the same composition as the full disk's below, by another interruption
def test_a_group_killed_between_its_members_final_saves_resumes_as_the_whole_group(
    reference, tmp_path, monkeypatch
):
    """Killed at the second member's final save, after the first member's landed and its
    summary said finished: the second member alone is left to train, in the group of three."""
    config, _ = reference
    _interrupted_at(monkeypatch, 1, STEPS, _killed)
    with pytest.raises(_Killed):
        _train_as_the_sweep_does(tmp_path, config)
    monkeypatch.undo()
    assert run_dir.read_summary(tmp_path / NAMES[0]).status == "finished"
    assert run_dir.read_summary(tmp_path / NAMES[1]) is None
    _resume_and_compare(reference, tmp_path, held=[0, 2])


def test_a_group_stopped_by_a_full_disk_resumes_as_the_whole_group(
    reference, tmp_path, monkeypatch
):
    """The second member's final save fails (no space left): it ends "failed", the first had
    finished; rerun with room, the second trains on from step 5 in the group of three."""
    config, _ = reference
    _interrupted_at(monkeypatch, 1, STEPS, _full_disk)
    with pytest.raises(OSError, match="No space left"):
        _train_as_the_sweep_does(tmp_path, config)
    monkeypatch.undo()
    failed = run_dir.read_summary(tmp_path / NAMES[1])
    assert failed.status == "failed" and "could not be saved" in failed.error
    _resume_and_compare(reference, tmp_path, held=[0, 2])


def test_the_resumed_group_is_launched_with_its_ended_members(reference, tmp_path):
    """The runner's command for the resumed group names every member, ended ones included, in
    the order they trained; the launch records nothing in the ended members' directories."""
    stage = runner.plan(SWEEP, str(tmp_path), SPEC)
    (unit,) = runner.launches(SWEEP, str(tmp_path), stage[1:2], SPEC, "m", True, stage)
    flags = dict(arg[2:].split("=", 1) for arg in unit.argv[3:])
    assert list(json.loads(flags["runs"])) == [name.partition("/")[2] for name in NAMES]
    assert unit.runs == (stage[1],) and unit.held == (stage[0], stage[2])
