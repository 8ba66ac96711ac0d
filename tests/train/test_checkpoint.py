"""Checkpoint round-trips are exact; keep-last-K, resume and crash safety hold."""

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from transformer_jax.config import TrainConfig
from transformer_jax.train.checkpoint import (
    _ORBAX_DIR,
    CHECKSUMS_FILE,
    Checkpointer,
    CorruptCheckpointError,
    _QuietOrbaxShutdownRaces,
)
from transformer_jax.train.optimizer import make_optimizer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _state(seed: int):
    key = jax.random.PRNGKey(seed)
    params = {
        "dense": {"kernel": jax.random.normal(key, (3, 4)), "bias": jnp.arange(4.0) + seed},
        "embed": jax.random.normal(jax.random.fold_in(key, 1), (5, 2), jnp.bfloat16),
    }
    # The real optimizer state: inject_hyperparams state with clip + adamw inside.
    train_config = TrainConfig(
        optimizer="adamw",
        schedule="rsqrt",
        learning_rate=1.0,
        steps=10,
        warmup_steps=2,
        weight_decay=0.1,
        grad_clip_norm=1.0,
    )
    tx = make_optimizer(train_config, d_model=8)
    opt_state = tx.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    _, opt_state = tx.update(grads, opt_state, params)
    return {
        "params": params,
        "opt_state": opt_state,
        "step": jnp.asarray(seed, jnp.int32),
        "rng": jax.random.fold_in(key, 2),  # raw uint32[2] key
        "typed_rng": jax.random.key(seed),  # typed key array
    }


def _to_numpy(tree):
    def leaf(x):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            return ("key", np.asarray(jax.random.key_data(x)))
        return np.asarray(x)

    return jax.tree.map(leaf, tree)


def _assert_identical(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
    for a, e in zip(
        jax.tree.leaves(_to_numpy(actual)), jax.tree.leaves(_to_numpy(expected)), strict=True
    ):
        np.testing.assert_array_equal(a, e)


def test_round_trip_is_exact_and_restores_data_state(tmp_path):
    state = _state(3)
    data_state = {"next_index": 17, "epoch": 2, "name": "copy"}
    with Checkpointer(tmp_path, every=1, keep=3) as ckpt:
        assert ckpt.restore(jax.eval_shape(lambda: state)) is None
        assert ckpt.save(5, state, data_state)
    with Checkpointer(tmp_path, every=1, keep=3) as ckpt:
        assert ckpt.latest_step() == 5
        restored, restored_data = ckpt.restore(jax.eval_shape(lambda: _state(0)))
    _assert_identical(restored, state)
    assert restored_data == data_state


def _tree(path):
    """Every file and directory under `path`, with its size and modification time."""
    return {
        os.path.join(root, name): (os.stat(os.path.join(root, name)).st_mtime_ns, len(files))
        for root, dirs, files in os.walk(path)
        for name in dirs + files
    }


def test_a_reader_leaves_a_save_in_progress_alone(tmp_path):
    """A read-only Checkpointer (generate, analysis) restores without changing the directory:
    the tmp directory of a running trainer's save in progress stays."""
    state = _state(3)
    with Checkpointer(tmp_path, every=1, keep=3) as ckpt:
        ckpt.save(5, state)
    in_progress = tmp_path / "checkpoints" / "10.orbax-checkpoint-tmp-1234"
    (in_progress / "state").mkdir(parents=True)
    before = _tree(tmp_path)
    with Checkpointer(tmp_path, every=1, keep=1, read_only=True) as reader:
        assert reader.latest_step() == 5
        restored, _ = reader.restore(jax.eval_shape(lambda: _state(0)))
        with pytest.raises(ValueError, match="read-only"):
            reader.save(6, state, force=True)
    _assert_identical(restored, state)
    assert _tree(tmp_path) == before
    with Checkpointer(tmp_path / "empty", every=1, keep=1, read_only=True) as reader:
        assert reader.restore(jax.eval_shape(lambda: state)) is None
    assert not (tmp_path / "empty").exists()


def test_a_corrupt_checkpoint_names_itself_and_the_previous_one(tmp_path):
    state = _state(1)
    with Checkpointer(tmp_path, every=1, keep=5) as ckpt:
        ckpt.save(1, state)
        ckpt.save(2, state)
    for root, _, files in os.walk(tmp_path / "checkpoints" / "2" / "state"):
        for name in files:
            open(os.path.join(root, name), "w").close()  # noqa: SIM115 (truncates it)
    with Checkpointer(tmp_path, every=1, keep=5, read_only=True) as reader:
        with pytest.raises(CorruptCheckpointError) as info:
            reader.restore(jax.eval_shape(lambda: state))
        message = str(info.value)
        assert f"checkpoint {tmp_path / 'checkpoints' / '2'} is damaged" in message
        assert "to use step 1, the previous one" in message
        _assert_identical(reader.restore(jax.eval_shape(lambda: state), step=1)[0], state)


def _largest_file(directory):
    files = [os.path.join(root, name) for root, _, names in os.walk(directory) for name in names]
    return max(files, key=os.path.getsize)


def test_flipped_bytes_are_refused_by_name(tmp_path):
    """Flipped bytes in an array file would restore as other weights (tensorstore checks no
    checksum of the data): the checksums recorded at the save catch them."""
    state = _state(1)
    with Checkpointer(tmp_path, every=1, keep=5) as ckpt:
        ckpt.save(1, state)
        ckpt.save(2, state)
    damaged = _largest_file(tmp_path / "checkpoints" / "2" / "state")
    data = bytearray(Path(damaged).read_bytes())
    for k in range(0, len(data), max(1, len(data) // 64)):
        data[k] ^= 0xFF
    Path(damaged).write_bytes(bytes(data))
    reader = Checkpointer(tmp_path, every=1, keep=5, read_only=True)
    with reader, pytest.raises(CorruptCheckpointError) as info:
        reader.restore(jax.eval_shape(lambda: state))
    message = str(info.value)
    assert f"checkpoint {tmp_path / 'checkpoints' / '2'} is damaged ({damaged}: " in message
    assert "SHA-256 differs" in message and "train.restore_fallback=true" in message


def test_fallback_restores_the_previous_checkpoint_only_when_asked(tmp_path, capsys):
    before, after = _state(1), _state(2)
    with Checkpointer(tmp_path, every=1, keep=5) as ckpt:
        ckpt.save(1, before, {"pos": 1})
        ckpt.save(2, after, {"pos": 2})
    os.remove(_largest_file(tmp_path / "checkpoints" / "2" / "state"))
    abstract = jax.eval_shape(lambda: before)
    with Checkpointer(tmp_path, every=1, keep=5) as ckpt, pytest.raises(CorruptCheckpointError):
        ckpt.restore(abstract)
    assert (tmp_path / "checkpoints" / "2").is_dir()  # refused: nothing moved
    with Checkpointer(tmp_path, every=1, keep=5, read_only=True, fallback=True) as reader:
        restored, data_state = reader.restore(abstract)
    _assert_identical(restored, before)
    assert data_state == {"pos": 1} and "it is skipped" in capsys.readouterr().err
    assert (tmp_path / "checkpoints" / "2").is_dir()  # a reader changes nothing
    with Checkpointer(tmp_path, every=1, keep=5, fallback=True) as ckpt:
        restored, _ = ckpt.restore(abstract)
        assert ckpt.all_steps() == [1]
        assert ckpt.save(2, after)  # the step trains again and saves again
    _assert_identical(restored, before)
    assert (tmp_path / "checkpoints_damaged" / "2").is_dir()
    assert "moved to" in capsys.readouterr().err


def test_a_damaged_loop_state_names_its_file(tmp_path):
    """Even in a checkpoint without recorded checksums (written before they were)."""
    with Checkpointer(tmp_path, every=1, keep=5) as ckpt:
        ckpt.save(1, _state(1), loop_state={"rates": [1.0]})
    step = tmp_path / "checkpoints" / "1"
    (step / CHECKSUMS_FILE).unlink()
    (step / "loop" / "metadata").write_text('{"rates": [1.0')
    reader = Checkpointer(tmp_path, every=1, keep=5, read_only=True)
    with reader, pytest.raises(CorruptCheckpointError, match=f"is damaged \\({step / 'loop'}: "):
        reader.restore_loop_state(1)


def test_bytes_and_none_data_states(tmp_path):
    state = {"w": jnp.ones(2)}
    blob = b'{"pos": 3}\x00\xff'
    with Checkpointer(tmp_path, every=1, keep=5) as ckpt:
        ckpt.save(1, state, blob)
        ckpt.save(2, state, None)
        abstract = jax.eval_shape(lambda: state)
        assert ckpt.restore(abstract, step=1)[1] == blob
        assert ckpt.restore(abstract, step=2)[1] is None


def test_every_and_keep_last_k_then_resume_latest(tmp_path):
    abstract = jax.eval_shape(lambda: _state(0))
    with Checkpointer(tmp_path, every=2, keep=2) as ckpt:
        saved = [step for step in range(1, 11) if ckpt.save(step, _state(step), {"pos": step})]
        assert saved == [2, 4, 6, 8, 10]
        assert ckpt.save(11, _state(11), {"pos": 11}, force=True)  # e.g. the final step
        ckpt.wait_until_finished()
        assert ckpt.all_steps() == [10, 11]
        # A forced save of a step that already exists is a no-op, not an error.
        assert not ckpt.save(11, _state(11), {"pos": 11}, force=True)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["10", "11"]
    with Checkpointer(tmp_path, every=2, keep=2) as ckpt:
        state, data_state = ckpt.restore(abstract)
        older, _ = ckpt.restore(abstract, step=10)
    _assert_identical(state, _state(11))
    _assert_identical(older, _state(10))
    assert data_state == {"pos": 11}


@pytest.mark.parametrize(("every", "keep"), [(0, 1), (1, 0), (-2, 3)])
def test_bad_arguments_raise(tmp_path, every, keep):
    with pytest.raises(ValueError, match="every|keep"):
        Checkpointer(tmp_path, every=every, keep=keep)


def test_process_killed_mid_save_keeps_previous_checkpoint(tmp_path):
    """os._exit right after an async save starts: step 2 is half-written, step 1 intact."""
    script = textwrap.dedent(
        """
        import os, sys
        import jax.numpy as jnp
        from transformer_jax.train.checkpoint import Checkpointer, CorruptCheckpointError
        ckpt = Checkpointer(sys.argv[1], every=1, keep=5)
        ckpt.save(1, {"w": jnp.ones((256, 256))}, {"pos": 1})
        ckpt.wait_until_finished()
        ckpt.save(2, {"w": jnp.full((4096, 1024), 2.0)}, {"pos": 2})
        os._exit(0)  # dies like a SIGKILL: no wait_until_finished, no cleanup
        """
    )
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, check=True)
    leftovers = os.listdir(tmp_path / "checkpoints")
    assert "1" in leftovers and "2" not in leftovers, leftovers
    abstract = {"w": jax.ShapeDtypeStruct((256, 256), jnp.float32)}
    with Checkpointer(tmp_path, every=1, keep=5) as ckpt:
        assert ckpt.latest_step() == 1
        state, data_state = ckpt.restore(abstract)
        np.testing.assert_array_equal(state["w"], np.ones((256, 256)))
        assert data_state == {"pos": 1}
        # The run can carry on and save step 2 again.
        assert ckpt.save(2, {"w": jnp.zeros((2,))}, {"pos": 2})
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2"]


def _write_checkpoint_like_existing_runs(workdir, step, state, data_state):
    """A checkpoint exactly as run directories written so far hold it (keep restoring these):
    checkpoints/<step>/state (orbax StandardSave) and checkpoints/<step>/data (orbax JSON of
    {"kind": "json", "value": grain iterator state})."""
    manager = ocp.CheckpointManager(
        os.path.join(workdir, "checkpoints"), item_names=("state", "data")
    )
    args = ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        data=ocp.args.JsonSave({"kind": "json", "value": data_state}),
    )
    manager.save(step, args=args, force=True)
    manager.wait_until_finished()
    manager.close()


def test_restores_checkpoints_of_existing_run_directories(tmp_path):
    state, data_state = _state(4), {"next_index": 96, "epoch": 1}
    _write_checkpoint_like_existing_runs(tmp_path, 40, state, data_state)
    with Checkpointer(tmp_path, every=20, keep=2) as ckpt:
        assert ckpt.latest_step() == 40
        restored, restored_data = ckpt.restore(jax.eval_shape(lambda: _state(0)))
        _assert_identical(restored, state)
        assert restored_data == data_state
        # The run carries on: not due at 50, due at 60.
        assert not ckpt.save(50, state, data_state)
        assert ckpt.save(60, state, data_state)


@pytest.mark.parametrize(
    "message",
    [
        "cannot schedule new futures after shutdown",
        "cannot schedule new futures after interpreter shutdown",
        "Event loop is closed",
    ],
)
def test_orbax_threads_racing_the_exit_after_a_failed_save_print_nothing(message):
    """After a failed save (reported once as CheckpointSaveError), orbax's background threads
    that outlive the exiting process log these RuntimeErrors with a traceback; a seed group's
    other seeds may still be saving when the process exits. Only those records are dropped."""

    def record(error, pathname):
        return logging.LogRecord(
            "absl", logging.ERROR, pathname, 1, "failed", None, (type(error), error, None)
        )

    quiet = _QuietOrbaxShutdownRaces()
    orbax_file = os.path.join(_ORBAX_DIR, "_src", "futures", "future.py")
    assert not quiet.filter(record(RuntimeError(message), orbax_file))
    assert quiet.filter(record(RuntimeError(message), __file__))  # not orbax's: kept
    assert quiet.filter(record(RuntimeError("something else"), orbax_file))
    assert quiet.filter(record(OSError(message), orbax_file))


def test_a_reader_opens_a_run_without_orbax_read_only_note(tmp_path, caplog):
    """generate and the analyses open checkpoints read only: orbax's warning saying so is not
    printed before their output, or before the one line of their error."""
    with Checkpointer(tmp_path, every=1, keep=1) as writer:
        writer.save(1, _state(0))
    with (
        caplog.at_level(logging.WARNING),
        Checkpointer(tmp_path, every=1, keep=1, read_only=True) as reader,
    ):
        assert reader.latest_step() == 1
    assert not [r for r in caplog.records if "read only" in r.getMessage()]
