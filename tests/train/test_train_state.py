"""TrainState.variables: the one place the flax variables dict of a train state is built."""

from transformer_jax.train.step import TrainState


def test_variables_hold_batch_stats_only_when_the_model_keeps_them():
    state = TrainState(step=0, params={"w": 1.0}, batch_stats={}, opt_state=(), rng=None)
    assert state.variables == {"params": {"w": 1.0}}
    norm = state.replace(batch_stats={"norm": {"mean": 0.5}})
    assert norm.variables == {"params": {"w": 1.0}, "batch_stats": {"norm": {"mean": 0.5}}}
    # Other parameters (a seed's slice, an average) with the state's statistics.
    assert norm.replace(params={"w": 2.0}).variables["params"] == {"w": 2.0}
