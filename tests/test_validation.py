"""Bad values refused in one line before anything is built or written: seeds, workdirs, sizes
beyond any machine, and the rough cases of the command lines; `--print_config`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_commands import _assert_one_line_error, _run_forked

REPO = str(Path(__file__).resolve().parents[1])
COPY = "--config=configs/algorithmic.py:copy"
UT = "--config.model.universal.enabled=True"
# (module, flags, the start of the error line). Each runs with a --workdir and a
# --config.data.data_dir of its own, neither of which may exist afterwards. The sizes are beyond
# any machine's memory (the one size check that depends on the machine: train/fits.py).
BAD = [
    ("main", [COPY, "--config.seed=4294967296"], "main: error: config.seed=4294967296 is not a"),
    ("main", [COPY, "--config.seed=-1"], "main: error: config.seed=-1 is not a valid seed"),
    ("main", [COPY, "--seeds=0,4294967296"], "main: error: --seeds=0,4294967296 holds 4294967296"),
    ("main", [COPY, "--seeds=-1"], "main: error: --seeds=-1 holds -1; valid seeds: integers"),
    (
        "main",
        [COPY, '--runs={"a": {"seed": 0}, "a": {"seed": 1}}'],
        "main: error: --runs names 'a' twice",
    ),
    ("main", [COPY, '--runs={"a": {"seed": 4294967296}}'], "main: error: "),
    ("main", [COPY, "--config.model.d_model=1000000000"], "main: error: model.d_model=1000000000 "),
    ("main", [COPY, "--config.model.ffn.d_ff=1000000000000"], "main: error: model.ffn.d_ff=10000"),
    (
        "main",
        [COPY, "--config.model.ffn.d_ff=2000000000"],
        "main: error: model.ffn.d_ff=2000000000",
    ),
    ("main", [COPY, "--config.data.batch_size=2000000000"], "main: error: data.batch_size=2000000"),
    (
        "main",
        [COPY, "--config.data.num_train=1000000000000000"],
        "main: error: data.num_train=1000000000000000 makes a dataset of at least",
    ),
    (
        "main",
        [COPY, "--config.model.positional.max_len=2000000000"],
        "main: error: model.positional.max_len=2000000000 ('sinusoidal' positions) cannot fit",
    ),
    ("main", [COPY, "--config.train.steps=1000000000000000"], "main: error: train.steps=10000000"),
    (
        "main",
        [COPY, UT, "--config.model.universal.steps=100000000"],
        "main: error: model.universal.steps=100000000 cannot fit",
    ),
    (
        "main",
        [COPY, "--config.model.num_encoder_layers=1000000"],
        "main: error: model.num_encoder_layers=1000000 cannot fit",
    ),
    ("main", [COPY, "--config.data.data_dir="], "main: error: data.data_dir='' is empty"),
    (
        "main",
        [COPY, "--config.data.data_dir=/proc/self/tfds"],
        "main: error: data.data_dir=/proc/self/tfds is under /proc, which holds no files; valid",
    ),
    (
        "main",
        [COPY, "--config.model.d_model=1e9"],
        "main: error: flag --config.model.d_model=1e9: invalid literal for int() with base 10: "
        "'1e9'; valid: an integer, written out in digits (1000000000, not 1e9)",
    ),
    ("main", ["--config=README.md"], "main: error: --config=README.md is not a Python config"),
    (  # a sweep file given as the config: a Python file without get_config()
        "main",
        ["--config=experiments/quickstart.py"],
        "main: error: --config=experiments/quickstart.py defines no get_config(); valid: a config",
    ),
    (
        "sweep",
        ["--sweep=README.md", "--workdir=HERE/run"],
        "sweep: error: sweep file 'README.md' is not Python (",
    ),
    (
        "sweep",
        ["--sweep=configs/algorithmic.py", "--workdir=HERE/run"],
        "sweep: error: sweep file 'configs/algorithmic.py' defines no get_sweep(); valid:",
    ),
    (  # 0,0 for 0,1: seed 0 would run alone, and nothing would say so
        "sweep",
        ["--sweep=experiments/quickstart.py", "--workdir=HERE/run", "--seeds=0,0"],
        "sweep: error: --seeds=0,0 repeats 0; valid: each seed once",
    ),
    ("main", [COPY, "--seeds=0,1,0"], "main: error: --seeds=0,1,0 repeats a seed (0); valid:"),
    (
        "main",
        ["--confg=configs/algorithmic.py:copy"],
        "main: error: --confg is not a flag; did you mean --config?",
    ),
    ("sweep", ["--wrkdir=x"], "sweep: error: --wrkdir is not a flag; did you mean --workdir?"),
    (
        "aot",
        [COPY, "--topology=local", "--group=1"],
        "aot: error: --group=1 is invalid; valid: 0 (none) or 2 or more",
    ),
    ("aot", [COPY, "--topology=local", "--fit_compiles=-1"], "aot: error: flag --fit_compiles=-1"),
    (
        "aot",
        [COPY, "--topology=local", "--config.model.d_model=1000000000"],
        "aot: error: model.d_model=1000000000 cannot fit",
    ),
]
# (module, flags with WORKDIR in place of a file's path and HERE in place of the case's own
# directory, the start of the error line).
WORKDIRS = [
    ("main", [COPY, "--workdir="], "main: error: --workdir='' is empty; valid: a directory"),
    ("main", [COPY, "--workdir= "], "main: error: --workdir=' ' is empty"),
    ("main", [COPY, "--workdir=WORKDIR"], "main: error: --workdir=WORKDIR is a file"),
    ("main", [COPY, "--workdir=WORKDIR/run"], "main: error: --workdir=WORKDIR/run is inside"),
    ("main", [COPY, "--workdir=/proc/self/run"], "main: error: --workdir=/proc/self/run is under"),
    (
        "main",
        [COPY, "--workdir=HERE/run", "--config.data.data_dir=WORKDIR"],
        "main: error: data.data_dir=WORKDIR is a file, not a directory; valid: a directory",
    ),
    (
        "main",
        [COPY, "--workdir=HERE/run", "--config.data.data_dir=WORKDIR/tfds"],
        "main: error: data.data_dir=WORKDIR/tfds is inside WORKDIR, a file, not a directory",
    ),
    ("sweep", ["--workdir=", "--report_only"], "sweep: error: --workdir='' is empty"),
    ("sweep", ["--workdir=WORKDIR", "--report_only"], "sweep: error: --workdir=WORKDIR is a file"),
    ("generate", ["--workdir=", "--input=0 1"], "generate: error: --workdir='' is empty"),
    ("analysis.attention_maps", ["--workdir= ", "--input=0", "--out=x.png"], "attention_maps: "),
]


def _module(name: str) -> str:
    return f"transformer_jax.{name}"


def _sets_data_dir(flags) -> bool:
    return any(f.startswith("--config.data.data_dir=") for f in flags)


def _assert_only_line(stderr: str, message: str) -> None:
    """The error line is all the command printed: no warning or library log before it."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), stderr[-2000:]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """BAD and WORKDIRS run by test_commands._run_forked, each in a directory of its own:
    (its directory, (exit status, stderr)) per case, in that order."""
    root = tmp_path_factory.mktemp("validation")
    cases, dirs = [], []
    for i, (module, flags, _) in enumerate(BAD):
        where = root / f"bad{i}"
        where.mkdir()
        own = [f"--workdir={where / 'run'}"] if module == "main" else []
        # A case that sets data_dir itself keeps its own value (a later flag would override it).
        if module != "sweep" and COPY in flags and not _sets_data_dir(flags):
            own.append(f"--config.data.data_dir={where / 'data'}")
        flags = [f.replace("HERE", str(where)) for f in flags]
        cases.append((_module(module), [*flags, *own]))
        dirs.append(where)
    for i, (module, flags, _) in enumerate(WORKDIRS):
        where = root / f"workdir{i}"
        where.mkdir()
        (where / "file").write_text("not a directory\n")
        if module == "main" and not _sets_data_dir(flags):
            flags.append(f"--config.data.data_dir={where / 'data'}")
        flags = [
            f.replace("WORKDIR", str(where / "file")).replace("HERE", str(where)) for f in flags
        ]
        cases.append((_module(module), flags))
        dirs.append(where)
    return list(zip(dirs, _run_forked(cases), strict=True))


@pytest.mark.parametrize(("module", "flags", "message"), BAD)
def test_a_bad_value_is_one_line_before_anything_is_written(results, module, flags, message):
    where, (status, stderr) = results[BAD.index((module, flags, message))]
    _assert_one_line_error(status, stderr, message)
    _assert_only_line(stderr, message)
    assert not (where / "run").exists() and not (where / "data").exists()


@pytest.mark.parametrize(("module", "flags", "message"), WORKDIRS)
def test_a_bad_workdir_names_the_flag(results, module, flags, message):
    where, (status, stderr) = results[len(BAD) + WORKDIRS.index((module, flags, message))]
    message = message.replace("WORKDIR", str(where / "file"))
    _assert_one_line_error(status, stderr, message)
    _assert_only_line(stderr, message)
    assert sorted(p.name for p in where.iterdir()) == ["file"]
    assert (where / "file").read_text() == "not a directory\n"


def test_print_config_lists_every_field_with_its_type_and_doc(tmp_path):
    # A process of its own: the forked runner reads its children's results from stdout, which
    # --print_config writes to.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_jax.main",
            f"--config={REPO}/configs/algorithmic.py:copy",
            "--print_config",
            "--config.model.d_model=64",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": REPO},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "model.d_model = 64  (int)" in done.stdout
    assert not list(tmp_path.iterdir())  # nothing written


def test_print_config_lines():
    from ml_collections import config_flags

    from transformer_jax.config.listing import listing

    config = config_flags.config_flags._ConfigFileParser("config").parse(
        "configs/algorithmic.py:copy"
    )
    lines = {line.split(" = ")[0]: line for line in listing(config.to_dict())}
    assert lines["train.steps"].startswith("train.steps = ")
    assert "(int)  # optimizer updates in the whole run" in lines["train.steps"]
    assert "(str)  # layernorm | rmsnorm" in lines["model.norm.kind"]
    assert "(int)  # longest train/test sequence, in symbols" in lines["data.max_len"]
    assert "(-1: from the data)" in lines["model.vocab_size"]
    assert "parameters, dropout and data order" in lines["seed"]
    # Every leaf of the config is listed once.
    leaves = config.to_dict()
    assert len(lines) == len(listing(leaves))
