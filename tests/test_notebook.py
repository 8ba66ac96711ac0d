"""notebooks/colab_tpu.ipynb runs top to bottom on CPU: a one-run sweep, its report and plots."""

import json
import textwrap
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "colab_tpu.ipynb"


@pytest.mark.slow
def test_colab_notebook_runs_a_sweep_on_cpu(tmp_path):
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
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    params = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    params.source += "\n" + "\n".join(
        f"{name} = {value!r}"
        for name, value in {
            "REPO_DIR": str(REPO),
            "INSTALL": False,
            "MOUNT_DRIVE": False,
            "SWEEP_FILE": str(sweep_file),
            "SWEEP_DIR": str(tmp_path / "sweep"),
        }.items()
    )
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute(cwd=str(REPO))
    outputs = json.dumps([c.get("outputs", []) for c in notebook.cells])
    assert "(CPU)" in outputs
    assert "train: compiled" in outputs and "roofline" in outputs  # the estimate cell
    assert (tmp_path / "sweep" / "report.md").exists()
    assert "text/markdown" in outputs and "image/png" in outputs
