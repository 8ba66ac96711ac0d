"""amy: without positions the encoder's outputs move with their tokens (NTHU slide 21)."""

import subprocess
import sys

import numpy as np
import pytest
from analysis_fixtures import assert_png

from transformer_jax.analysis import amy

SENTENCE, SHUFFLED = "Amy gave Bob a book", "Bob gave Amy a book"


@pytest.fixture(scope="module")
def result():
    return amy.demonstrate(SENTENCE, SHUFFLED, "Amy")


def test_permutation_matches_repeated_words_in_order():
    perm = amy.permutation(["a", "b", "a", "c"], ["a", "c", "a", "b"])
    np.testing.assert_array_equal(perm, [0, 3, 2, 1])
    with pytest.raises(ValueError, match="--shuffled='a b d'"):
        amy.permutation(["a", "b", "c"], ["a", "b", "d"])


def test_outputs_move_with_their_tokens_without_positions(result):
    assert result.shuffled_words == SHUFFLED.split()
    np.testing.assert_array_equal(result.perm, [2, 1, 0, 3, 4])
    y_TD, y_shuffled_TD = result.outputs["none"]
    np.testing.assert_allclose(y_shuffled_TD, y_TD[result.perm], atol=1e-5)
    assert result.difference["none"].max() < 1e-5
    assert np.abs(y_TD).max() > 0.5  # Not trivially zero: LayerNorm outputs are of order 1.


def test_sinusoidal_positions_change_the_same_tokens_output(result):
    amy_index = result.words.index("Amy")
    assert result.difference["sinusoidal"][amy_index] > 1e-2
    # "gave", "a" and "book" stay in place, yet their outputs change: their context moved.
    assert np.all(result.difference["sinusoidal"] > 1e-2)


@pytest.mark.parametrize("positional", ["rotary", "learned"])
def test_other_positional_encodings_also_break_equivariance(positional):
    result = amy.demonstrate(SENTENCE, SHUFFLED, "Amy", positional=positional)
    assert result.difference["none"].max() < 1e-5
    assert result.difference[positional].max() > 1e-3


@pytest.mark.parametrize("seed", range(5))
def test_random_shuffle_is_never_the_identity(seed):
    words = ["x", "y"]
    shuffled = amy.random_shuffle(words, seed)
    assert sorted(shuffled) == words and shuffled != words


def test_trained_run_is_equivariant_without_positions(copy_workdir):
    result = amy.demonstrate("3 1 4 1 5", "5 1 4 1 3", "3", workdir=str(copy_workdir))
    assert result.difference["none"].max() < 1e-5
    assert result.difference["sinusoidal"][0] > 1e-2


def test_bad_flags_are_rejected():
    with pytest.raises(ValueError, match="--token='Carl'"):
        amy.demonstrate(SENTENCE, SHUFFLED, "Carl")
    with pytest.raises(ValueError, match="--positional='none'"):
        amy.demonstrate(SENTENCE, SHUFFLED, "Amy", positional="none")


def test_plot(tmp_path, result):
    assert_png(amy.plot(result, "Amy", str(tmp_path / "a.png")))


@pytest.mark.slow
def test_command_line(tmp_path):
    out = tmp_path / "amy.png"
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_jax.analysis.amy", f"--out={out}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "'Amy': without positions the outputs differ by" in proc.stdout
    assert_png(out)
