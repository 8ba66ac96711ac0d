"""One code version per sweep (sweep/code_version.py), in a git repository of its own: a tree
with uncommitted changes to the code is refused before anything is written, --allow_dirty
launches it and records the diff's sha256, and the report marks mixed and dirty sweeps."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from sweep_fixtures import MACHINE

from transformer_jax.report.report import write_report
from transformer_jax.sweep import code_version, load_sweep, run_sweep

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(project, monkeypatch):
    """The sweep tests' project as a git repository with one commit."""
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    (project / ".gitignore").write_text("__pycache__/\nruns*/\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "first")
    return project


def demo(workdir, **kwargs):
    return run_sweep(
        load_sweep("experiments/demo.py"),
        "experiments/demo.py",
        str(workdir),
        variants=["base"],
        main_module="fake_main",
        machine=MACHINE,
        **kwargs,
    )


def open_text(path) -> str:
    with open(path) as f:
        return f.read()


def code_of(workdir, seed=0):
    with open(workdir / "base" / f"seed_{seed}" / "code.json") as f:
        return json.load(f)["launches"]


def test_a_clean_tree_records_its_commit(repo):
    head = git("rev-parse", "HEAD")
    assert demo(repo / "runs") == {"finished": 2}
    assert code_of(repo / "runs") == [{"git_commit": head, "diff_sha256": None}]
    report = write_report(str(repo / "runs"))
    text = open_text(report)
    assert f"runs trained at: `{head}` (2 runs)" in text
    assert "Mixed code" not in text and "Uncommitted code" not in text


def test_a_dirty_tree_is_refused_unless_allowed_and_its_diff_hashed(repo):
    head = git("rev-parse", "HEAD")
    with open(repo / "configs" / "fake.py", "a") as f:
        f.write("# an edit\n")
    (repo / "experiments" / "new.py").write_text("# untracked\n")
    (repo / "notes.txt").write_text("outside the code: not checked\n")
    with pytest.raises(ValueError, match=r"configs/fake.py, experiments/new.py; commit them"):
        demo(repo / "runs")
    assert not (repo / "runs").exists()

    # The command line: one error line, exit status 2, nothing written.
    cmd = [sys.executable, "-m", "transformer_jax.sweep", "--sweep=experiments/demo.py"]
    cmd += ["--workdir=runs_cli", "--main_module=fake_main"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    errors = [line for line in done.stderr.splitlines() if line.startswith("sweep: error:")]
    assert done.returncode == 2 and len(errors) == 1 and "--allow_dirty" in errors[0]
    assert not (repo / "runs_cli").exists()

    assert demo(repo / "runs", allow_dirty=True) == {"finished": 2}
    # The reference: git's own diff of the code directories, then the untracked file.
    diff = subprocess.run(
        ["git", "diff", "HEAD", "--binary", "--", *code_version.TRACKED_DIRS],
        capture_output=True,
        check=True,
    ).stdout
    expected = hashlib.sha256(diff + b"experiments/new.py\0# untracked\n").hexdigest()
    assert code_of(repo / "runs") == [{"git_commit": head, "diff_sha256": expected}]
    text = open_text(write_report(str(repo / "runs")))
    assert "> ⚠ **Uncommitted code**: 2 run(s)" in text
    assert f"`{head}+diff:{expected}` (2 runs)" in text


def test_runs_at_two_commits_are_marked_mixed(repo):
    first = git("rev-parse", "HEAD")
    assert demo(repo / "runs", seeds=[0]) == {"finished": 1}
    with open(repo / "configs" / "fake.py", "a") as f:
        f.write("# a second commit\n")
    git("commit", "-q", "-am", "second")
    second = git("rev-parse", "HEAD")
    assert demo(repo / "runs") == {"finished": 2}  # seed 1 at the second commit
    text = open_text(write_report(str(repo / "runs")))
    assert text.splitlines()[2].startswith("> ⚠ **Mixed code**: the runs were trained at 2")
    assert f"`{first}` (1 runs)" in text and f"`{second}` (1 runs)" in text


# A stand-in trainer that edits the code as it trains seed 0 (as a user editing a file while the
# sweep runs), then trains as fake_main does.
EDITING_MAIN = """
import sys
if "--config.seed=0" in sys.argv:
    with open("configs/fake.py", "a") as f:
        f.write("# edited while the sweep runs\\n")
import fake_main
"""


def test_code_edited_while_a_sweep_runs_is_recorded_by_the_runs_started_after(repo):
    """Each run records the code read at its own start: seed 1, started after seed 0 edited
    the tree, records the edit's diff; the report says the code was mixed and uncommitted."""
    (repo / "editing_main.py").write_text(EDITING_MAIN)
    git("add", "editing_main.py")
    git("commit", "-q", "-m", "editing trainer")
    head = git("rev-parse", "HEAD")
    counts = run_sweep(
        load_sweep("experiments/demo.py"),
        "experiments/demo.py",
        str(repo / "runs"),
        variants=["base"],
        main_module="editing_main",
        machine=MACHINE,
        seed_groups=False,
    )
    assert counts == {"finished": 2}
    assert code_of(repo / "runs", 0) == [{"git_commit": head, "diff_sha256": None}]
    [edited] = code_of(repo / "runs", 1)
    assert edited["git_commit"] == head and edited["diff_sha256"] is not None
    text = open_text(write_report(str(repo / "runs")))
    assert "> ⚠ **Uncommitted code**: 1 run(s)" in text and "**Mixed code**" in text


def test_where_git_cannot_check_the_launch_says_so_and_records_the_files_hash(
    project, monkeypatch, capsys
):
    """Outside a checkout, and with no git on PATH: one line says why the check cannot run;
    each run records "unknown" and the sha256 of the code's files, which an edit changes."""
    outside = code_version.checked(allow_dirty=False, cwd=str(project))
    code_version.say_unchecked(outside)
    (line,) = capsys.readouterr().err.splitlines()
    assert "dirty-tree check cannot run" in line and "is not in a git checkout" in line
    assert outside.commit == "unknown" and len(outside.files_sha256) == 64
    assert "launched outside the checkout" in code_version.read(str(project / "configs")).unchecked
    monkeypatch.setenv("PATH", str(project / "nowhere"))
    assert code_version.read(str(project)).unchecked == "no git on PATH"
    with open(project / "configs" / "fake.py", "a") as f:
        f.write("# an edit\n")
    assert code_version.read(str(project)).files_sha256 != outside.files_sha256


def test_a_refused_launch_outside_a_checkout_prints_only_its_error(project, capsys):
    """The line saying the dirty-tree check cannot run comes once the launch is accepted: a
    launch refused (here a variant the sweep lacks) leaves its error line alone."""
    with pytest.raises(ValueError, match="nope"):
        run_sweep(
            load_sweep("experiments/demo.py"),
            "experiments/demo.py",
            str(project / "runs"),
            variants=["nope"],
            main_module="fake_main",
            machine=MACHINE,
        )
    assert capsys.readouterr().err == ""
    assert not (project / "runs").exists()
    demo(project / "runs")
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "dirty-tree" in x]
    assert "is not in a git checkout" in line
