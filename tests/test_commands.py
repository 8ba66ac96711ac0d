"""Every command prints one `<command>: error: ...` line for a user error, with exit status 2."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_jax.commands import (
    USER_ERROR_EXIT_CODE,
    launch_dir,
    recorded_command,
    recorded_shell_command,
)

REPO = Path(__file__).resolve().parents[1]

# Every command line of the package: its module and the name its error lines start with.
ANALYSES = (
    "amy",
    "attention_maps",
    "confusion",
    "length_profile",
    "ponder",
    "positional_heatmap",
    "reread_positions",
    "softmax_temperature",
)
COMMANDS = {
    "transformer_jax.main": "main",
    "transformer_jax.generate": "generate",
    "transformer_jax.sweep": "sweep",
    "transformer_jax.aot": "aot",
    "transformer_jax.report.bleu_bootstrap": "bleu_bootstrap",
    "transformer_jax.convert": "convert",
    **{f"transformer_jax.analysis.{name}": name for name in ANALYSES},
}
CONFIG_COMMANDS = ("transformer_jax.main", "transformer_jax.aot")  # those with --config
CONFIG = "--config=configs/algorithmic.py:copy"

# Runs `python -m module argv...` for each (module, argv) read as JSON on stdin, in a child forked
# from one process that has made the imports every command shares: a process start and a JAX
# import per command would take most of a minute. A child starts as `python -m` does (a fresh
# __main__, no command imported yet); its exit status and stderr are written as JSON on stdout.
_FORKING_RUNNER = """
import json, os, runpy, sys, tempfile, traceback
import absl.app, jax, tensorflow_datasets
import transformer_jax.analysis.figures, transformer_jax.models, transformer_jax.sweep.runner
import transformer_jax.train.restore, transformer_jax.train.trainer  # commands: not preloaded
results = []
for module, argv in json.load(sys.stdin):
    with tempfile.TemporaryFile() as stderr:
        pid = os.fork()
        if pid == 0:
            os.dup2(stderr.fileno(), 2)
            sys.argv = [module, *argv]
            code = 0
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as exit:
                if isinstance(exit.code, str):
                    print(exit.code, file=sys.stderr)
                code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        stderr.seek(0)
        results.append((status, stderr.read().decode(errors="replace")))
json.dump(results, sys.stdout)
"""


def _run_forked(cases: list[tuple[str, list[str]]]) -> list[tuple[int, str]]:
    """(exit status, stderr) of `python -m module argv...` for each case; see _FORKING_RUNNER."""
    command = [sys.executable, "-c", _FORKING_RUNNER]
    done = subprocess.run(
        command, input=json.dumps(cases), cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(result) for result in json.loads(done.stdout)]


def _assert_one_line_error(status: int, stderr: str, start: str) -> None:
    assert status == USER_ERROR_EXIT_CODE, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith(start), stderr[-2000:]


def _bad_flag_cases() -> list[tuple[str, list[str], str]]:
    """(module, argv, the start of the error line) for each command: an unknown flag; for those
    with --config, also an unknown field of it and a value of the wrong type; a missing flag."""
    cases = [
        (m, ["--no_such_flag=1"], f"{n}: error: --no_such_flag is not a flag")
        for m, n in COMMANDS.items()
    ]
    cases += [
        ("transformer_jax.generate", ["--input=0 1"], "generate: error: flag --workdir=None:"),
        ("transformer_jax.sweep", [], "sweep: error: --workdir is required"),
    ]
    for module in CONFIG_COMMANDS:
        name = COMMANDS[module]
        cases += [
            (
                module,
                [CONFIG, "--config.model.xyz=3"],
                f"{name}: error: --config.model.xyz: config.model has no field 'xyz'; its fields:",
            ),
            (
                module,
                [CONFIG, "--config.train.steps=abc"],
                f"{name}: error: flag --config.train.steps=abc: invalid literal for int()",
            ),
        ]
    return cases


def test_every_command_is_listed():
    """A command added to the package (an absl `app.run` under `__main__`) joins COMMANDS, so the
    test below checks its flag errors too."""
    package = REPO / "transformer_jax"
    found, handed_over = set(), {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
        text = path.read_text()
        if re.search(r"^\s+app\.run\(", text, flags=re.MULTILINE):
            found.add(name)
        # A __main__ handing the process over (transformer_jax/sweep/__main__.py): the command
        # is run by the package's name.
        if handover := re.search(r"runpy\.run_module\(\s*[\"']([\w.]+)[\"']", text):
            handed_over[handover.group(1)] = name
    assert {handed_over.get(name, name) for name in found} == set(COMMANDS)


def test_a_bad_flag_is_one_line_for_every_command():
    cases = _bad_flag_cases()
    results = _run_forked([(module, argv) for module, argv, _ in cases])
    for (module, argv, start), (status, stderr) in zip(cases, results, strict=True):
        assert start in stderr, (module, argv, stderr[-2000:])
        _assert_one_line_error(status, stderr, start)


# (module, flags, the start of the error line): user errors found after the flags are parsed.
USER_ERRORS = [
    (
        "transformer_jax.main",
        ["--config=configs/algorithmic.py:copy", "--config.data.batch_size=0"],
        "main: error: data.batch_size=0 must be an integer >= 1",
    ),
    (
        "transformer_jax.main",
        ["--config=configs/algorithmic.py:copy", "--config.model.nonexistent=3"],
        "main: error: --config.model.nonexistent: config.model has no field 'nonexistent'; "
        "its fields: attention, d_model,",
    ),
    (
        "transformer_jax.main",
        ["--config=configs/algorithmic.py:copy", "--config.train.steps=abc"],
        "main: error: flag --config.train.steps=abc: invalid literal for int()",
    ),
    (  # The unknown field after a valid override is the one named.
        "transformer_jax.main",
        [
            "--config=configs/algorithmic.py:copy",
            "--config.train.steps=30",
            "--config.train.profile_stepz=3",
        ],
        "main: error: --config.train.profile_stepz: config.train has no field 'profile_stepz'",
    ),
    (  # A misspelt field: the nearest names, as absl suggests for a misspelt flag.
        "transformer_jax.main",
        ["--config=configs/algorithmic.py:copy", "--config.train.learning_rat=1"],
        "main: error: --config.train.learning_rat: config.train has no field 'learning_rat' "
        "(did you mean --config.train.learning_rate?); its fields: b1, b2,",
    ),
    (  # A train field that moved into an evaluator's block names its new place.
        "transformer_jax.main",
        ["--config=configs/algorithmic.py:copy", "--config.train.generate_eval=False"],
        "main: error: --config.train.generate_eval: config.train.generate_eval is now "
        "train.evaluators.generation.enabled: set --config.train.evaluators.generation.enabled",
    ),
    (
        "transformer_jax.main",
        ["--config=configs/algorithmic.py:copy", "--config.train.evaluators.bleu.every=0"],
        "main: error: train.evaluators.bleu.every=0 must be an integer >= 1",
    ),
    (
        "transformer_jax.main",
        ["--config=configs/algorithmic.py:copy", "--config.train.profile_steps=(4, 2)"],
        "main: error: train.profile_steps=(4, 2) must be (start, stop), integers with 0 <= start",
    ),
    (
        "transformer_jax.main",
        ["--config=configs/nope.py"],
        "main: error: --config=configs/nope.py: [Errno 2] No such file or directory",
    ),
    (
        "transformer_jax.main",
        ["--config=configs/algorithmic.py:nosuch"],
        "main: error: config argument 'nosuch' is not valid; valid: one of",
    ),
    ("transformer_jax.generate", ["--input=0 1"], "generate: error: --workdir="),
    (
        "transformer_jax.analysis.attention_maps",
        ["--input=0 1", "--out=x.png"],
        "attention_maps: error: --workdir=",
    ),
]


@pytest.fixture(scope="module")
def user_error_results(tmp_path_factory):
    """USER_ERRORS, each with a --workdir of its own (not there before), run by _run_forked:
    (workdir, (exit status, stderr)) per case."""
    root = tmp_path_factory.mktemp("user_errors")
    workdirs = [root / str(i) / "run" for i in range(len(USER_ERRORS))]
    for workdir in workdirs:
        workdir.parent.mkdir()
    cases = [
        (module, [f"--workdir={workdir}", *flags])
        for workdir, (module, flags, _) in zip(workdirs, USER_ERRORS, strict=True)
    ]
    return list(zip(workdirs, _run_forked(cases), strict=True))


@pytest.mark.parametrize(("module", "flags", "message"), USER_ERRORS)
def test_user_errors_print_one_line(user_error_results, module, flags, message):
    workdir, (status, stderr) = user_error_results[USER_ERRORS.index((module, flags, message))]
    _assert_one_line_error(status, stderr, message)
    assert not workdir.exists()


@pytest.mark.parametrize(
    ("argv", "recorded"),
    [
        # An absolute path inside the repository, as a flag's value or an argument of its own.
        (["--workdir=/repo/results/x", "--parallel=2"], "--workdir=results/x --parallel=2"),
        (["--workdir", "/repo/runs/x/"], "--workdir runs/x"),
        (["--sweep=/repo/experiments/a.py"], "--sweep=experiments/a.py"),
        # As typed: relative paths, paths outside the repository, values that are not paths.
        (["--workdir=runs/x", "--variants=a,b"], "--workdir=runs/x --variants=a,b"),
        (["--workdir=/elsewhere/x"], "--workdir=/elsewhere/x"),
        (["--workdir=/repository_other/x"], "--workdir=/repository_other/x"),
        (["--workdir=/repo/../elsewhere"], "--workdir=/repo/../elsewhere"),
        (["--input=a b"], "'--input=a b'"),
    ],
)
def test_recorded_command_names_repository_paths_relative_to_it(argv, recorded):
    assert recorded_command("m", argv, repository="/repo") == f"python -m m {recorded}"


def test_recorded_command_defaults_to_this_checkout():
    recorded = recorded_command("x", [f"--workdir={REPO}/results/y"])
    assert recorded == "python -m x --workdir=results/y"


def test_launch_dir_is_relative_inside_the_repository(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO / "configs")
    assert launch_dir() == "configs"
    monkeypatch.chdir(REPO)
    assert launch_dir() == "."
    monkeypatch.chdir(tmp_path)
    assert launch_dir() == str(tmp_path)


def test_a_run_launched_in_the_repository_is_recorded_relative_to_it():
    argv = ["/usr/bin/python3", "-m", "m", "--workdir=/repo/results/s/a/seed_0", "--config=c.py"]
    env = {"OMP_NUM_THREADS": "1", "JAX_COMPILATION_CACHE_DIR": "/repo/results/s/.cache"}
    recorded = recorded_shell_command(argv, "/repo", env, repository="/repo")
    assert recorded == (
        "OMP_NUM_THREADS=1 JAX_COMPILATION_CACHE_DIR=results/s/.cache "
        "python -m m --workdir=results/s/a/seed_0 --config=c.py"
    )
    # From a folder of the repository: cd there (relative), paths relative to it.
    assert recorded_shell_command(argv, "/repo/results", {}, repository="/repo") == (
        "cd results && python -m m --workdir=s/a/seed_0 --config=c.py"
    )
    # Outside the repository: the exact, absolute line, as before.
    assert recorded_shell_command(argv, "/elsewhere", env, repository="/repo") == (
        "cd /elsewhere && OMP_NUM_THREADS=1 JAX_COMPILATION_CACHE_DIR=/repo/results/s/.cache "
        "/usr/bin/python3 -m m --workdir=/repo/results/s/a/seed_0 --config=c.py"
    )
