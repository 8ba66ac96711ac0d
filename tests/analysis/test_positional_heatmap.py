"""positional_heatmap: the matrices are the model's own encodings; nearby positions look alike."""

import subprocess
import sys

import numpy as np
import pytest
from analysis_fixtures import assert_png

from transformer_jax.analysis import positional_heatmap as ph
from transformer_jax.layers.positional import sinusoidal_table


def test_sinusoidal_heatmap_is_the_models_table():
    result = ph.positional_heatmap("sinusoidal", num_positions=100, d_model=64)
    np.testing.assert_array_equal(result.heatmap_LI, sinusoidal_table(100, 64))
    assert result.heatmap_LI.shape == (100, 64)


def test_rotary_heatmap_is_cos_of_position_times_frequency():
    result = ph.positional_heatmap("rotary", num_positions=50, d_model=16, base=10000.0)
    theta_I = 10000.0 ** (-np.arange(0, 16, 2) / 16)
    expected_PI = np.cos(np.arange(50)[:, None] * theta_I[None, :])
    np.testing.assert_allclose(result.heatmap_LI, expected_PI, atol=2e-5)
    # The rotated unit pairs are (cos, sin) of the same angles.
    np.testing.assert_allclose(result.vectors_LD[:, 0::2], expected_PI, atol=2e-5)


@pytest.mark.parametrize("kind", ["sinusoidal", "rotary"])
def test_similarity_is_sum_of_cosines_of_the_offset_and_independent_of_position(kind):
    d_model = 32
    result = ph.positional_heatmap(kind, num_positions=60, d_model=d_model)
    w_I = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    expected_J = np.cos(np.arange(60)[:, None] * w_I[None, :]).sum(axis=1)
    np.testing.assert_allclose(result.similarity_J, expected_J, atol=1e-4)
    assert result.similarity_J[0] == pytest.approx(d_model / 2, abs=1e-4)
    assert result.spread_J.max() < 1e-3  # PE(p).PE(p+k) depends on k only.
    # Nearby positions look alike: similarity falls with the first few offsets.
    assert np.all(np.diff(result.similarity_J[:5]) < 0)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="--kind='alibi'"):
        ph.positional_heatmap("alibi")
    with pytest.raises(ValueError, match="--d_model=15"):
        ph.positional_heatmap("rotary", d_model=15)


def test_plot_writes_png(tmp_path):
    for kind in ph.KINDS:
        out = ph.plot(ph.positional_heatmap(kind, 20, 8), str(tmp_path / f"{kind}.png"))
        assert_png(out)


def test_command_line(tmp_path):
    out = tmp_path / "pe.png"
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_jax.analysis.positional_heatmap", f"--out={out}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "sinusoidal: heatmap 100 positions x 64 columns" in proc.stdout
    assert "32.00" in proc.stdout  # PE(p).PE(p) = d_model / 2
    assert_png(out)
