"""softmax_temperature: the NCCU slide numbers and Vaswani's 1/sqrt(d_k) argument."""

import math
import subprocess
import sys

import jax
import numpy as np
import pytest
from analysis_fixtures import assert_png

from transformer_jax.analysis import softmax_temperature as st


def two_decimals(values) -> list[str]:
    return [f"{v:.2f}" for v in values]


def test_slide_numbers():
    plain = st.softmax_with_temperature(st.SLIDE_SCORES)
    assert two_decimals(plain) == ["0.61", "0.30", "0.03", "0.02", "0.04"]
    cooled = st.softmax_with_temperature(st.SLIDE_SCORES, math.sqrt(5))
    assert two_decimals(cooled) == ["0.40", "0.29", "0.11", "0.08", "0.11"]
    scaled = np.asarray(st.SLIDE_SCORES) / math.sqrt(5)
    assert two_decimals(scaled) == ["1.74", "1.43", "0.45", "0.13", "0.49"]


def test_softmax_matches_reference():
    scores = np.array([0.5, -1.0, 2.0, 0.0])
    expected = np.exp(scores / 3) / np.exp(scores / 3).sum()
    np.testing.assert_allclose(st.softmax_with_temperature(scores, 3.0), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="--tau=0"):
        st.softmax_with_temperature(scores, 0)


@pytest.fixture(scope="module")
def sweep():
    return st.scaling_sweep(d_ks=(1, 4, 16, 64, 256, 1024), num_keys=16, samples=1000)


def test_logit_variance_grows_as_d_k_unless_scaled(sweep):
    np.testing.assert_allclose(sweep.logit_var["none"], sweep.d_k, rtol=0.1)
    np.testing.assert_allclose(sweep.logit_var["sqrt_dk"], 1.0, rtol=0.1)


def test_softmax_saturates_and_its_gradient_vanishes_without_scaling(sweep):
    none, scaled = sweep.max_prob["none"], sweep.max_prob["sqrt_dk"]
    assert np.all(np.diff(none) > 0) and none[-1] > 0.9
    assert np.ptp(scaled) < 0.05 and scaled.max() < 0.3  # uniform would be 1/16
    jac_none, jac_scaled = sweep.jacobian_norm["none"], sweep.jacobian_norm["sqrt_dk"]
    assert jac_none[-1] < jac_none[0] / 4
    assert np.ptp(jac_scaled) < 0.05


def test_jacobian_norm_is_that_of_diag_p_minus_p_p_transpose():
    """The sweep's Jacobian (via jax.jacfwd) against the closed form, on one row."""
    logits = np.array([1.0, -0.5, 2.0, 0.3], np.float32)
    p = np.exp(logits) / np.exp(logits).sum()
    expected = np.linalg.norm(np.diag(p) - np.outer(p, p))
    got = np.linalg.norm(jax.jacfwd(st.attention_weights)(logits))
    assert got == pytest.approx(expected, rel=1e-5)


def test_plot_and_report(tmp_path, sweep):
    assert_png(st.plot(st.SLIDE_SCORES, st.SLIDE_TAU, sweep, str(tmp_path / "a.png")))
    text = st.report(st.SLIDE_SCORES, st.SLIDE_TAU, sweep)
    assert "= [0.61, 0.30, 0.03, 0.02, 0.04]" in text
    assert "softmax(scores / tau) = [0.40, 0.29, 0.11, 0.08, 0.11]" in text


@pytest.mark.slow
def test_command_line(tmp_path):
    out = tmp_path / "softmax.png"
    command = "transformer_jax.analysis.softmax_temperature"
    proc = subprocess.run(
        [sys.executable, "-m", command, "--max_log2_dk=3", "--samples=200", f"--out={out}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "softmax(scores / tau) = [0.40, 0.29, 0.11, 0.08, 0.11]" in proc.stdout
    assert_png(out)
