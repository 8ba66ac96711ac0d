"""notebooks/colab_tpu.ipynb: its code cell unpacks an uploaded zip of the repository; its estimate
cell reports a failure that printed nothing; and the whole notebook runs top to bottom on CPU
from such a zip: a two-variant sweep, its report and plots."""

import json
import shutil
import subprocess
import textwrap
import types
import zipfile
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "colab_tpu.ipynb"


def cells():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    return notebook, [c for c in notebook.cells if c.cell_type == "code"]


def parameters(**values) -> dict:
    """The parameters cell's names, with `values` in place of its defaults."""
    namespace = {}
    _, code = cells()
    exec(code[0].source, namespace)
    namespace.update(values)
    return namespace


def run_cell(index: int, namespace: dict) -> dict:
    _, code = cells()
    exec(code[index].source, namespace)
    return namespace


def repository_zip(path: Path, files, prefix: str = "") -> Path:
    """A zip like `git archive --format=zip [--prefix=...]` makes: `files` from this checkout."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in files:
            if (REPO / name).is_file():
                archive.write(REPO / name, prefix + name)
    return path


def test_the_code_cell_unpacks_an_uploaded_zip(tmp_path):
    zipped = repository_zip(
        tmp_path / "transformer_jax.zip",
        ["pyproject.toml", "transformer_jax/__init__.py", "transformer_jax/colab.py"],
        prefix="transformer_jax-main/",
    )
    namespace = parameters(
        REPO_ZIP=str(zipped),
        CODE_DIR=str(tmp_path / "code"),
        INSTALL=False,
        MOUNT_DRIVE=False,
        SWEEP_DIR=str(tmp_path / "sweep"),
    )
    run_cell(1, namespace)
    repository = tmp_path / "code" / "transformer_jax-main"
    assert namespace["REPO_DIR"] == str(repository)
    assert (repository / "transformer_jax" / "__init__.py").read_bytes() == (
        REPO / "transformer_jax" / "__init__.py"
    ).read_bytes()


def test_the_code_cell_names_the_parameters_when_none_is_set(tmp_path):
    namespace = parameters(INSTALL=False, MOUNT_DRIVE=False, CODE_DIR=str(tmp_path / "code"))
    with pytest.raises(ValueError, match="set REPO_DIR, REPO_ZIP or REPO_URL"):
        run_cell(1, namespace)


def test_the_estimate_cell_reports_a_silent_failure(tmp_path, capsys):
    # `false` stands in for the interpreter: the estimate exits 1 having printed nothing.
    interpreter = types.SimpleNamespace(executable=shutil.which("false"))
    namespace = parameters(REPO_DIR=str(tmp_path))
    namespace.update(sys=interpreter, subprocess=subprocess)
    run_cell(3, namespace)
    assert capsys.readouterr().out.splitlines()[-1] == "the estimate exited with status 1"


@pytest.mark.slow
def test_colab_notebook_runs_a_sweep_from_a_zip_on_cpu(tmp_path):
    nbclient = pytest.importorskip("nbclient")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    zipped = repository_zip(tmp_path / "transformer_jax.zip", listed)
    sweep_file = tmp_path / "tiny_sweep.py"
    tiny = {
        "train.steps": 4,
        "train.log_every": 2,
        "train.eval_every": 4,
        "train.checkpoint_every": 4,
        "train.warmup_steps": 1,
        "model.d_model": 16,
        "model.ffn.d_ff": 32,
        "model.attention.num_heads": 2,
        "model.num_encoder_layers": 1,
        "model.num_decoder_layers": 1,
        "data.num_train": 64,
        "data.num_test": 16,
        "data.num_test_long": 16,
        "data.batch_size": 8,
        "data.data_dir": str(tmp_path / "tfds"),
    }
    sweep_file.write_text(
        textwrap.dedent(f'''
            """Tiny notebook check."""
            from transformer_jax.sweep import Sweep

            def get_sweep():
                tiny = {tiny!r}
                return Sweep(
                    config="configs/algorithmic.py",
                    variants={{
                        "baseline": tiny,
                        "pre_norm": {{**tiny, "model.norm.position": "pre"}},
                    }},
                    seeds=(0,),
                    metrics=("test/token_accuracy",),
                    baseline="baseline",
                )
        ''')
    )
    notebook, code = cells()
    code[0].source += "\n" + "\n".join(
        f"{name} = {value!r}"
        for name, value in {
            "REPO_ZIP": str(zipped),
            "CODE_DIR": str(tmp_path / "code"),
            "INSTALL": False,
            "MOUNT_DRIVE": False,
            "SWEEP_FILE": str(sweep_file),
            "SWEEP_DIR": str(tmp_path / "sweep"),
        }.items()
    )
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3")
    client.execute(cwd=str(tmp_path))
    outputs = json.dumps([c.get("outputs", []) for c in notebook.cells])
    assert f"repository: {tmp_path / 'code'}" in outputs  # the unpacked copy, not this checkout
    assert "(CPU)" in outputs
    assert "train: compiled" in outputs and "roofline" in outputs  # the estimate cell
    assert (tmp_path / "sweep" / "report.md").exists()
    assert "text/markdown" in outputs and "image/png" in outputs


def fake_wheel(folder: Path, name: str, version: str, *requires: str) -> None:
    """A wheel holding only its metadata: enough for pip's resolver, which is all that runs."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = "".join(
        [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
        + [f"Requires-Dist: {r}\n" for r in requires]
    )
    wheel = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", wheel)
        archive.writestr(f"{info}/RECORD", "")


@pytest.fixture
def older_jax_runtime(tmp_path, monkeypatch):
    """A runtime with jax 0.6.2, jaxlib 0.6.2 and libtpu 0.0.17 preinstalled (what `pip freeze`
    says), an index (local wheels, no network) where jax 0.7.1 and a flax needing it are newest,
    and a repository that needs jax and flax. Each `pip install` runs for real, as a dry run
    against that index, writing what it would install to `report.json`."""
    index = tmp_path / "index"
    index.mkdir()
    for version in ("0.6.2", "0.7.1"):
        fake_wheel(index, "jax", version, f"jaxlib=={version}")
        fake_wheel(index, "jaxlib", version)
    fake_wheel(index, "libtpu", "0.0.17")
    fake_wheel(index, "libtpu", "0.0.21")
    fake_wheel(index, "flax", "0.11.0", "jax>=0.6.1")
    fake_wheel(index, "flax", "0.12.0", "jax>=0.7.1")
    repo = tmp_path / "repo"
    (repo / "transformer_jax").mkdir(parents=True)
    shutil.copy(REPO / "transformer_jax" / "colab.py", repo / "transformer_jax" / "colab.py")
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["jax>=0.6", "flax>=0.10"]\n'
        "[tool.setuptools]\npackages = []\n"
    )
    report = tmp_path / "report.json"
    real_run = subprocess.run
    freeze = "absl-py==2.1.0\njax==0.6.2\njaxlib==0.6.2\nlibtpu==0.0.17\nnumpy==2.1.0\n"

    def run(command, *args, **kwargs):
        if command[1:] == ["-m", "pip", "freeze"]:
            return subprocess.CompletedProcess(command, 0, stdout=freeze, stderr="")
        if command[1:4] == ["-m", "pip", "install"]:
            command = [
                *command,
                *("--dry-run", "--ignore-installed", "--no-build-isolation", "--no-index"),
                *("--find-links", str(index), "--report", str(report)),
            ]
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    return types.SimpleNamespace(repo=repo, report=report, index=index, tmp=tmp_path)


def test_the_install_keeps_a_preinstalled_older_jax(older_jax_runtime, capsys):
    runtime = older_jax_runtime
    namespace = parameters(
        REPO_DIR=str(runtime.repo), INSTALL=True, MOUNT_DRIVE=False, SWEEP_DIR=str(runtime.tmp)
    )
    run_cell(1, namespace)
    picked = {
        item["metadata"]["name"]: item["metadata"]["version"]
        for item in json.loads(runtime.report.read_text())["install"]
    }
    # Without the constraint pip takes jax 0.7.1 and flax 0.12.0, and leaves libtpu behind.
    assert picked["jax"] == "0.6.2" and picked["jaxlib"] == "0.6.2"
    assert picked["flax"] == "0.11.0"
    assert "libtpu" not in picked  # nothing asked for it, so nothing changes it
    assert "kept: jax==0.6.2, jaxlib==0.6.2, libtpu==0.0.17" in capsys.readouterr().out


def test_the_install_stops_naming_a_dependency_that_needs_another_jax(older_jax_runtime):
    runtime = older_jax_runtime
    pyproject = runtime.repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"flax>=0.10"', '"flax>=0.12"'))
    colab = run_cell(1, parameters(REPO_DIR=str(runtime.repo), INSTALL=False))["colab"]
    with pytest.raises(colab.Stop) as stopped:
        colab.install(str(runtime.repo))
    line = stopped.value._render_traceback_()
    assert len(line) == 1 and "\n" not in line[0]
    assert "keep the runtime's jax==0.6.2, jaxlib==0.6.2, libtpu==0.0.17" in line[0]
    assert "flax 0.12.0 depends on jax>=0.7.1" in line[0]
    assert not runtime.report.exists()


def test_the_probe_cell_stops_a_tpu_runtime_whose_jax_sees_only_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("COLAB_TPU_ADDR", "10.0.0.2:8470")
    # The probe's interpreter prints what jax answers on such a runtime.
    interpreter = tmp_path / "python"
    interpreter.write_text("#!/bin/sh\necho cpu 1 cpu\n")
    interpreter.chmod(0o755)
    namespace = run_cell(1, parameters(REPO_DIR=str(REPO), INSTALL=False, SWEEP_DIR=str(tmp_path)))
    namespace["sys"] = types.SimpleNamespace(executable=str(interpreter))
    with pytest.raises(namespace["colab"].Stop, match="has a TPU .*COLAB_TPU_ADDR.* only the CPU"):
        run_cell(2, namespace)
