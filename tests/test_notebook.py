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
        ["pyproject.toml", "transformer_jax/__init__.py"],
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
