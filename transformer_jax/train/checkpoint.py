"""Thin wrapper over orbax's CheckpointManager: periodic saves, keep-last-K, auto-resume.

Cadence: the checkpointer decides. Call `save` as often as convenient (the trainer calls it at
every logging boundary); it saves the steps that are multiples of `every`, plus any step saved
with `force=True` (the end of training, a stop signal).

Layout: `DIR/checkpoints/<step>/{state,data,loop}`. `state` is any pytree of arrays (params,
optimizer state, step, PRNG keys; raw uint32 `jax.random.PRNGKey` keys and typed
`jax.random.key` keys both round-trip) saved with `StandardSave`; `data` is the input
iterator state saved as JSON (grain's `get_state()` dicts; `bytes` states are stored
base64-encoded and come back as `bytes`). One JSON document serves every process: all hosts
run the same pipeline in lockstep (train/parallel.py), so a checkpoint restores on any number
of hosts. `loop` is the training loop's own host state as JSON (the trainer's partial logging
window and throughput so far: train/trainer.py); checkpoints written before it existed have none.
grain's own orbax handler (`grain.checkpoint.CheckpointHandler`) is not used: it
writes `process_<i>-of-<n>.json` and restores only with the same process count.

Crash safety: orbax writes each step into `<step>.orbax-checkpoint-tmp-*` and renames
it to `<step>` only after every file is written and committed, so a crash, SIGKILL or
Ctrl-C during a save leaves earlier checkpoints untouched; the half-written tmp
directory is never listed as a step and is deleted when the next Checkpointer opens
the directory for writing (a read-only one, as `load_run` opens, leaves it: it may be the
save in progress of a running trainer). Saves are asynchronous (the arrays are copied to
host memory before
`save` returns, so donating the state afterwards is safe); call `wait_until_finished()`
or `close()` before exiting, or the last save may be lost.

A save that fails (a full disk) fails in orbax's background thread; the next call of `save`,
`check`, `wait_until_finished` or `close` raises it as one `CheckpointSaveError` naming the step
directory and the cause, instead of orbax's tracebacks, and the earlier checkpoints stay.
"""

import base64
import logging
import os
from typing import Any

import orbax.checkpoint as ocp

from transformer_jax.run_dir import CHECKPOINT_DIR

_STATE = "state"
_DATA = "data"
_LOOP = "loop"
_ORBAX_DIR = os.path.dirname(os.path.abspath(ocp.__file__))


def _encode_data_state(data_state: Any) -> dict[str, Any]:
    if isinstance(data_state, bytes):
        return {"kind": "bytes", "value": base64.b64encode(data_state).decode("ascii")}
    return {"kind": "json", "value": data_state}


def _decode_data_state(stored: dict[str, Any]) -> Any:
    if stored["kind"] == "bytes":
        return base64.b64decode(stored["value"])
    return stored["value"]


class CorruptCheckpointError(ValueError):
    """A checkpoint that does not restore; the message names it and the previous one."""


# What a failed write raises: an OSError from Python, a ValueError from tensorstore's C++ writer.
_SAVE_ERRORS = (OSError, ValueError)


class CheckpointSaveError(OSError):
    """A save that did not reach the disk (e.g. it is full); the message names the step
    directory, the cause and the last good checkpoint, which is left as it was."""


class _QuietOrbaxSaveErrors(logging.Filter):
    """Drops orbax's log records of a failed background save (each failed save logs several
    tracebacks): the Checkpointer reports it as one CheckpointSaveError instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        failed_save = record.exc_info is not None and isinstance(record.exc_info[1], _SAVE_ERRORS)
        return not (failed_save and record.pathname.startswith(_ORBAX_DIR))


class Checkpointer:
    """Saves every `every` steps into `workdir/checkpoints`, keeping the newest `keep`."""

    def __init__(
        self, workdir: str | os.PathLike, *, every: int, keep: int, read_only: bool = False
    ):
        """`read_only=True` for readers (generate, analysis): nothing in the directory changes,
        in particular the tmp directory of a save in progress by a training run is kept."""
        if not (isinstance(every, int) and every > 0):
            raise ValueError(f"checkpoint every={every!r} is invalid; expected an int > 0")
        if not (isinstance(keep, int) and keep > 0):
            raise ValueError(f"checkpoint keep={keep!r} is invalid; expected an int > 0")
        self.directory = os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)
        self.read_only = read_only
        if read_only:
            options = ocp.CheckpointManagerOptions(
                read_only=True,
                create=False,
                # A tmp directory may be the save in progress of a running trainer.
                cleanup_tmp_directories=False,
                save_interval_steps=0,
                max_to_keep=None,
            )
        else:
            options = ocp.CheckpointManagerOptions(
                # Exactly `step % every == 0`; orbax's default policy would also save
                # whatever step comes first in an empty directory.
                save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(every),
                max_to_keep=keep,
                create=True,
                # Removes tmp directories left by a save that crashed half-way.
                cleanup_tmp_directories=True,
            )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=(_STATE, _DATA, _LOOP)
        )
        self._pending_step: int | None = None  # the step of the save that may still be running
        self._quiet = _QuietOrbaxSaveErrors()
        logging.getLogger("absl").addFilter(self._quiet)

    def latest_step(self) -> int | None:
        """The newest finished checkpoint's step, or None if there is none."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Steps of all finished checkpoints still kept, ascending."""
        return sorted(self._manager.all_steps())

    def save(
        self,
        step: int,
        state: Any,
        data_state: Any = None,
        *,
        loop_state: dict[str, Any] | None = None,
        force: bool = False,
    ) -> bool:
        """Saves `state` (pytree), `data_state` (JSON-able or bytes) and `loop_state` (JSON-able,
        see `restore_loop_state`) at `step` when due.

        Due means `step % every == 0` and `step` newer than the latest checkpoint, so calling
        this every step (or every logging step) saves on the checkpoint cadence; `force=True`
        saves any step (the end of training, a stop signal). Returns whether a save started.
        Saving a step that already has a checkpoint is a no-op returning False. Raises
        CheckpointSaveError when an earlier save failed.
        """
        if self.read_only:
            raise ValueError(f"{self.directory} was opened read-only; it cannot save")
        self.check()
        args = ocp.args.Composite(
            **{
                _STATE: ocp.args.StandardSave(state),
                _DATA: ocp.args.JsonSave(_encode_data_state(data_state)),
                _LOOP: ocp.args.JsonSave(loop_state or {}),
            }
        )
        try:
            started = self._manager.save(step, args=args, force=force)
        except ocp.checkpoint_manager.StepAlreadyExistsError:
            # E.g. the final forced save when the last step was a periodic save too.
            return False
        except _SAVE_ERRORS as error:
            raise self._save_failed(step, error) from error
        if started:
            self._pending_step = step
        return started

    def check(self) -> None:
        """Raises CheckpointSaveError if the last save failed in the background; returns at
        once while it is still running (cheap: call it every logging step)."""
        if self._pending_step is not None and not self._manager.is_saving_in_progress():
            self.wait_until_finished()

    def _save_failed(self, step: int, error: Exception) -> CheckpointSaveError:
        latest = self.latest_step()
        kept = f"step {latest} is the last good checkpoint" if latest is not None else "none"
        cause = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        path = os.path.join(self.directory, str(step))
        return CheckpointSaveError(f"checkpoint {path} could not be saved ({cause[:300]}); {kept}")

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, Any] | None:
        """Returns `(state, data_state)` from `step` (default: latest), or None if none exist.

        `abstract_state` has the structure of the saved state, with leaves that are
        `jax.ShapeDtypeStruct`s (e.g. `jax.eval_shape(init_fn, ...)`) or concrete arrays;
        restored values are bit-identical to the saved ones.
        """
        if step is None:
            step = self.latest_step()
            if step is None:
                return None
        try:
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    **{
                        _STATE: ocp.args.StandardRestore(abstract_state),
                        _DATA: ocp.args.JsonRestore(),
                    }
                ),
            )
        except Exception as error:  # orbax raises whatever its readers hit on a bad file.
            raise CorruptCheckpointError(self._unreadable(step, error)) from error
        return restored[_STATE], _decode_data_state(restored[_DATA])

    def _unreadable(self, step: int, error: Exception) -> str:
        """Names the checkpoint and the way back to the one before it. No automatic fallback:
        silently retraining from an older step would hide the damage (and, for a reader, give
        an older model than asked for); the user moves the bad step aside."""
        path = os.path.join(self.directory, str(step))
        earlier = [s for s in self.all_steps() if s < step]
        fallback = (
            f"move {path} out of {self.directory} to use step {earlier[-1]}, the previous one"
            if earlier
            else "there is no earlier checkpoint: start again in a new --workdir"
        )
        cause = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return f"checkpoint {path} is unreadable ({cause[:300]}); {fallback}"

    def restore_loop_state(self, step: int) -> dict[str, Any]:
        """The `loop_state` saved at `step`; {} for a checkpoint written without one."""
        if not os.path.isdir(os.path.join(self.directory, str(step), _LOOP)):
            return {}
        restored = self._manager.restore(
            step, args=ocp.args.Composite(**{_LOOP: ocp.args.JsonRestore()})
        )
        return dict(restored[_LOOP] or {})

    def wait_until_finished(self) -> None:
        """Blocks until the pending asynchronous save (if any) is on disk; raises
        CheckpointSaveError if it failed."""
        step, self._pending_step = self._pending_step, None
        try:
            self._manager.wait_until_finished()
        except _SAVE_ERRORS as error:
            raise self._save_failed(step, error) from error

    def close(self) -> None:
        """Waits for pending saves (raising CheckpointSaveError if one failed), then releases
        orbax's resources."""
        try:
            if not self.read_only:
                self.wait_until_finished()
        finally:
            self._manager.close()
            logging.getLogger("absl").removeFilter(self._quiet)

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
