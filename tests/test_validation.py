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
    ("main", ["--config=README.md"], "main: error: --config=README.md is not a Python config"),
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
# (module, flags with WORKDIR in place of the workdir, the start of the error line).
WORKDIRS = [
    ("main", [COPY, "--workdir="], "main: error: --workdir='' is empty; valid: a directory"),
    ("main", [COPY, "--workdir= "], "main: error: --workdir=' ' is empty"),
    ("main", [COPY, "--workdir=WORKDIR"], "main: error: --workdir=WORKDIR is a file"),
    ("main", [COPY, "--workdir=WORKDIR/run"], "main: error: --workdir=WORKDIR/run is inside"),
    ("main", [COPY, "--workdir=/proc/self/run"], "main: error: --workdir=/proc/self/run is under"),
    ("sweep", ["--workdir=", "--report_only"], "sweep: error: --workdir='' is empty"),
    ("sweep", ["--workdir=WORKDIR", "--report_only"], "sweep: error: --workdir=WORKDIR is a file"),
    ("generate", ["--workdir=", "--input=0 1"], "generate: error: --workdir='' is empty"),
    ("analysis.attention_maps", ["--workdir= ", "--input=0", "--out=x.png"], "attention_maps: "),
]


def _module(name: str) -> str:
    return f"transformer_jax.{name}"


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
        sets_data_dir = any(f.startswith("--config.data.data_dir=") for f in flags)
        if module != "sweep" and "--config=README.md" not in flags and not sets_data_dir:
            own.append(f"--config.data.data_dir={where / 'data'}")
        cases.append((_module(module), [*flags, *own]))
        dirs.append(where)
    for i, (module, flags, _) in enumerate(WORKDIRS):
        where = root / f"workdir{i}"
        where.mkdir()
        (where / "file").write_text("not a directory\n")
        flags = [f.replace("WORKDIR", str(where / "file")) for f in flags]
        if module == "main":
            flags.append(f"--config.data.data_dir={where / 'data'}")
        cases.append((_module(module), flags))
        dirs.append(where)
    return list(zip(dirs, _run_forked(cases), strict=True))


@pytest.mark.parametrize(("module", "flags", "message"), BAD)
def test_a_bad_value_is_one_line_before_anything_is_written(results, module, flags, message):
    where, (status, stderr) = results[BAD.index((module, flags, message))]
    _assert_one_line_error(status, stderr, message)
    assert not (where / "run").exists() and not (where / "data").exists()


@pytest.mark.parametrize(("module", "flags", "message"), WORKDIRS)
def test_a_bad_workdir_names_the_flag(results, module, flags, message):
    where, (status, stderr) = results[len(BAD) + WORKDIRS.index((module, flags, message))]
    _assert_one_line_error(status, stderr, message.replace("WORKDIR", str(where / "file")))
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
