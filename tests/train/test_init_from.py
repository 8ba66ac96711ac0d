"""train.init_from: a run that starts from another run's latest parameters, at step 0 with a
fresh optimizer state; refused, before its directory exists, for a path that is not a run or a
model of other shapes; its own checkpoint wins on a resume."""

import jax
import numpy as np
import pytest
from train_fixtures import tiny_config

from transformer_jax.train import init_from
from transformer_jax.train.restore import load_run
from transformer_jax.train.trainer import train_and_evaluate

TRAIN = dict(steps_=10, log_every=5, eval_every=10, checkpoint_every=5, generate_eval=False)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A finished 10-step run and the data directory it built."""
    root = tmp_path_factory.mktemp("init_from")
    train_and_evaluate(tiny_config(root / "tfds", **TRAIN), str(root / "first"))
    return root


def leaves_equal(a, b) -> bool:
    flat_a, flat_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(flat_a) == len(flat_b) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(flat_a, flat_b, strict=True)
    )


def test_a_run_starts_from_the_source_runs_final_parameters(first, monkeypatch):
    started = []
    original = init_from.with_source

    def with_source(state, source):
        state = original(state, source)
        started.append(jax.tree.map(np.array, state))  # a copy: training donates the state
        return state

    monkeypatch.setattr(init_from, "with_source", with_source)
    config = tiny_config(first / "tfds", **TRAIN, init_from=str(first / "first"))
    config.seed = 1  # another initialisation than the source's, had it been random
    summary = train_and_evaluate(config, str(first / "second"))
    assert summary.status == "finished" and summary.step == 10
    (state,) = started
    final = load_run(str(first / "first")).state
    assert int(state.step) == 0
    assert leaves_equal(state.params, final.params)
    # Fresh Adam moments: zeros, not the source's.
    moments = [x for x in jax.tree.leaves(state.opt_state) if np.ndim(x) > 0]
    assert moments and all(not np.any(np.asarray(x)) for x in moments)
    assert not leaves_equal(state.opt_state, final.opt_state)

    # A resume restores the run's own checkpoint and never reads the source (gone here).
    monkeypatch.undo()
    resumed = tiny_config(first / "tfds", **{**TRAIN, "steps_": 15}, init_from=str(first / "gone"))
    resumed.seed = 1
    assert train_and_evaluate(resumed, str(first / "second")).step == 15


def test_init_from_refuses_other_shapes_and_non_runs_before_writing(first):
    wider = tiny_config(first / "tfds", **TRAIN, init_from=str(first / "first"))
    wider.model.ffn.d_ff = 128
    with pytest.raises(ValueError, match=r"model\.ffn\.d_ff=64 there, 128 here"):
        train_and_evaluate(wider, str(first / "wider"))
    assert not (first / "wider").exists()
    empty = first / "empty"
    empty.mkdir()
    not_a_run = tiny_config(first / "tfds", **TRAIN, init_from=str(empty))
    with pytest.raises(ValueError, match=r"train\.init_from=.* is not a run directory"):
        train_and_evaluate(not_a_run, str(first / "other"))
    assert not (first / "other").exists()
