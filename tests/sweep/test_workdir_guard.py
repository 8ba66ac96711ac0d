"""A sweep cannot clobber another sweep's workdir or report, seeds cannot collide, a selection
that runs nothing is refused, and runners racing over a stale lock take it one at a time."""

import json
import os

import pytest
from sweep_fixtures import MACHINE, run_demo

from transformer_jax.report.report import write_report
from transformer_jax.sweep import Sweep, launcher, run_sweep
from transformer_jax.sweep_cli import report_with_sweep

OTHER = Sweep(
    config="configs/fake.py",
    variants={"base": {}, "wider": {"fake.offset": 0.2}},
    seeds=(0, 1),
    metrics=("test/seq_accuracy",),
    baseline="base",
)


def _files(workdir):
    return {
        p.name: p.read_bytes()
        for p in workdir.iterdir()
        if p.is_file() and not p.name.startswith(".")
    }


def test_another_sweep_is_refused_and_the_old_report_kept(project):
    workdir = project / "out"
    run_demo(workdir, variants=["base", "better"])
    before = _files(workdir)
    with pytest.raises(ValueError, match="holds another sweep .*variants differ.*--replace"):
        run_sweep(OTHER, "experiments/other.py", str(workdir), main_module="fake_main")
    assert _files(workdir) == before
    assert not (workdir / "wider").exists()
    # --report_only --sweep: the same refusal; the report rebuilt from the old record is the old.
    from transformer_jax.sweep_dir import update_sweep_json

    stored = json.loads((workdir / "sweep.json").read_text())
    with pytest.raises(ValueError, match="holds another sweep"):
        update_sweep_json(
            str(workdir),
            OTHER.to_dict(),
            "experiments/other.py",
            "configs/fake.py",
            False,
            "fake_main",
        )
    assert json.loads((workdir / "sweep.json").read_text()) == stored
    # Told to replace it: the old records are copied first, byte for byte.
    run_sweep(
        OTHER,
        "experiments/other.py",
        str(workdir),
        main_module="fake_main",
        machine=MACHINE,
        replace=True,
    )
    write_report(str(workdir))
    kept = workdir / "replaced" / "1"
    assert _files(kept) == before
    assert json.loads((workdir / "sweep.json").read_text())["variants"]["wider"]


def test_a_metric_added_is_the_same_sweep(project):
    workdir = project / "out"
    run_demo(workdir, variants=["base"])
    stored = json.loads((workdir / "sweep.json").read_text())
    from transformer_jax.sweep_dir import update_sweep_json

    changed = dict(stored, metrics=["test/seq_accuracy", "test/loss"])
    update_sweep_json(
        str(workdir), changed, "experiments/demo.py", stored["config_spec"], False, "fake_main"
    )
    assert not (workdir / "replaced").exists()


@pytest.mark.parametrize("replace", [False, True])
def test_a_refused_report_only_sweep_leaves_sweep_json_as_it_was(project, replace, capsys):
    """`--report_only --sweep` records the definition, then writes the report: a report
    refused (here a run's summary.json cut short) says nothing was written, and nothing was:
    sweep.json is the old one and no replaced/<n>/ is left (with --replace or a metric added)."""
    workdir = project / "out"
    run_demo(workdir, variants=["base", "better"])
    before = _files(workdir)
    summary = workdir / "base" / "seed_0" / "summary.json"
    good = summary.read_bytes()
    summary.write_bytes(good[:20])
    (project / "experiments" / "other.py").write_text(
        '"""Another sweep."""\nfrom transformer_jax.sweep import Sweep\n\n'
        f"def get_sweep():\n    return Sweep(**{OTHER.to_dict()!r})\n"
    )
    sweep_file = "experiments/other.py" if replace else "experiments/demo.py"
    capsys.readouterr()
    with pytest.raises(ValueError, match="summary.json is damaged"):
        report_with_sweep(str(workdir), sweep_file, None, False, replace)
    assert _files(workdir) == before
    assert not (workdir / "replaced").exists()
    assert capsys.readouterr().out == ""
    summary.write_bytes(good)
    if replace:  # the other sweep's runs are not there: refused, as fewer than runs.csv lists
        with pytest.raises(ValueError, match="nothing was written"):
            report_with_sweep(str(workdir), sweep_file, None, False, replace)
        assert _files(workdir) == before and not (workdir / "replaced").exists()
    report_with_sweep(str(workdir), sweep_file, None, replace, replace)  # --force
    assert (workdir / "replaced" / "1").is_dir() == replace
    assert ("another sweep replaces" in capsys.readouterr().out) == replace


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ((0, 2**32), "holds 4294967296; valid seeds: integers from 0 to 4294967295"),
        ((-1, 0), "holds -1; valid seeds"),
        ((0, 0), "contains duplicates"),
    ],
)
def test_sweep_seeds_are_distinct_and_in_range(seeds, message):
    with pytest.raises(ValueError, match=message):
        Sweep(
            config="configs/fake.py",
            variants={"a": {}},
            seeds=seeds,
            metrics=("test/seq_accuracy",),
            baseline="a",
        )


def test_only_confirmation_seeds_on_a_fresh_workdir_is_refused(project):
    sweep = Sweep(
        config="configs/fake.py",
        variants={"base": {}, "better": {"fake.mode": "ok"}},
        seeds=(0, 1),
        metrics=("test/seq_accuracy",),
        baseline="base",
        nuisance={"fake.offset": (0.0, 0.1)},
        select_on="validation/loss",
        select_mode="min",
        confirm_seeds=(10,),
    )
    workdir = project / "out"
    with pytest.raises(ValueError, match="--seeds=10 selects only confirmation seeds"):
        run_sweep(sweep, "experiments/t.py", str(workdir), seeds=[10], main_module="fake_main")
    assert not workdir.exists()


@pytest.mark.parametrize("workdir", ["", "  "])
def test_an_empty_workdir_is_refused(project, workdir):
    with pytest.raises(ValueError, match="is empty; valid: a directory path"):
        run_demo(workdir)
    assert sorted(os.listdir(project)) == ["configs", "experiments", "fake_main.py"]


def test_a_lock_released_between_a_runners_create_and_read_is_taken(tmp_path, monkeypatch):
    """The window the racing runners below hit at random, opened on purpose: the lock exists
    when a runner fails to create it and is gone (its holder finished) when the runner reads
    it. The runner takes the lock; it used to read it as stale and fail removing it
    (FileNotFoundError)."""
    lock = tmp_path / launcher.LOCK_FILE
    lock.write_text(json.dumps({"pid": os.getppid(), "hostname": launcher.socket.gethostname()}))

    def released_first(path, *args, **kwargs):
        if os.fspath(path) == str(lock) and not args:  # the runner's read of the holder
            lock.unlink(missing_ok=True)
        return open(path, *args, **kwargs)

    monkeypatch.setattr(launcher, "open", released_first, raising=False)
    with launcher.WorkdirLock(str(tmp_path)):
        monkeypatch.undo()
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


def test_a_runner_leaving_removes_only_its_own_lock(tmp_path):
    """A lock another runner holds by the time this one leaves (it took over one it found
    stale) stays: a runner removes the lock only while it records this runner."""
    lock = tmp_path / launcher.LOCK_FILE
    other = json.dumps({"pid": os.getppid(), "hostname": launcher.socket.gethostname()})
    with launcher.WorkdirLock(str(tmp_path)):
        lock.write_text(other)
    assert lock.read_text() == other
    with pytest.raises(ValueError, match="another sweep runner"):
        launcher.WorkdirLock(str(tmp_path)).__enter__()


@pytest.mark.slow  # 20 rounds of forked runners racing: load-dependent, so not in the default tier
def test_runners_racing_over_a_stale_lock_take_it_one_at_a_time(tmp_path):
    """Forked runners over one stale lock, 20 rounds: each either holds the lock or is refused
    with the "another sweep runner" line; none fails otherwise (FileNotFoundError)."""
    lock = tmp_path / launcher.LOCK_FILE
    for _ in range(20):
        lock.write_text(
            json.dumps({"pid": 2**22 + 12345, "hostname": launcher.socket.gethostname()})
        )
        start = tmp_path / "go"
        children = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                while not start.exists():
                    pass
                try:
                    with launcher.WorkdirLock(str(tmp_path)):
                        code = 10
                except ValueError as error:
                    code = 11 if "another sweep runner" in str(error) else 1
                except BaseException:
                    code = 1
                os._exit(code)
            children.append(pid)
        start.touch()
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
        start.unlink()
        assert set(codes) <= {10, 11} and 10 in codes, codes
        assert not lock.exists()
