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
directory and the cause, instead of orbax's tracebacks, and the earlier checkpoints stay. The
half-written step is deleted at once (the space it holds may be what the run's summary needs),
and the tracebacks of the writes still in flight when it failed are not printed.

Integrity: orbax and tensorstore verify no checksum of the array bytes (zarr3's crc32c covers
only a shard's index), so flipped bytes would restore as other weights. When a save's files are
written, and before orbax renames its directory into place, the primary process records the
SHA-256 of each of them in `<step>/CHECKSUMS_FILE` (orbax's step metadata and commit marker
aside); `restore` compares them first and refuses a damaged checkpoint by name
(CorruptCheckpointError). Opened with `fallback=True` (train.restore_fallback), a damaged latest
checkpoint is moved aside to `DIR/checkpoints_damaged/` and the previous one restored instead,
with a note on stderr; without it the user is told how. The cost: one read of the step's files
per save, in orbax's background thread (from the page cache, just written), and per restore.
"""

import base64
import contextlib
import glob
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import time
from typing import Any

import orbax.checkpoint as ocp

from transformer_jax.run_dir import CHECKPOINT_DIR

_STATE = "state"
_DATA = "data"
_LOOP = "loop"
_ORBAX_DIR = os.path.dirname(os.path.abspath(ocp.__file__))
CHECKSUMS_FILE = "checksums.json"  # {"sha256": {path relative to the step: hex digest}}
# orbax's step metadata and commit marker: written or updated as it commits, after the checksums.
_UNCHECKED_FILES = (CHECKSUMS_FILE, "_CHECKPOINT_METADATA", "commit_success.txt")
DAMAGED_DIR = "checkpoints_damaged"  # where fallback=True moves a damaged checkpoint


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


class _QuietOrbaxShutdownRaces(logging.Filter):
    """Drops what orbax's background threads log when, after a failed save, they outlive the
    executor or event loop the exiting process already shut ("cannot schedule new futures after
    shutdown" or "... after interpreter shutdown", "Event loop is closed"): the failed save was
    reported once; these race the exit (a seed group's other seeds may still be saving)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        shutdown = isinstance(error, RuntimeError) and (
            "cannot schedule new futures after" in str(error)
            or "Event loop is closed" in str(error)
        )
        return not (shutdown and record.pathname.startswith(_ORBAX_DIR))


class _QuietUnretrievedSaveErrors(logging.Filter):
    """Drops asyncio's "exception was never retrieved" records of a failed save's writes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info is not None and isinstance(record.exc_info[1], _SAVE_ERRORS))


class _QuietReadOnlyNote(logging.Filter):
    """Drops orbax's warning that a reader's checkpoint directory is opened read only ("Given
    directory is read only=..."): it is how every reader (generate, the analyses) opens a run,
    and the line came before their output, or before the one line of their error."""

    def filter(self, record: logging.LogRecord) -> bool:
        note = str(record.msg).startswith("Given directory is read only")
        return not (note and record.pathname.startswith(_ORBAX_DIR))


_READ_ONLY_NOTE = _QuietReadOnlyNote()


class Checkpointer:
    """Saves every `every` steps into `workdir/checkpoints`, keeping the newest `keep`."""

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        every: int,
        keep: int,
        read_only: bool = False,
        fallback: bool = False,
        primary: bool = True,
    ):
        """`read_only=True` for readers (generate, analysis): nothing in the directory changes,
        in particular the tmp directory of a save in progress by a training run is kept.
        `fallback=True`: `restore` of the latest step falls back to the newest undamaged one
        (see the module doc). `primary`: this process records the checksums (process 0 of a
        multi-host run; every process saves its part, one writes the record)."""
        if not (isinstance(every, int) and every > 0):
            raise ValueError(f"checkpoint every={every!r} is invalid; expected an int > 0")
        if not (isinstance(keep, int) and keep > 0):
            raise ValueError(f"checkpoint keep={keep!r} is invalid; expected an int > 0")
        self.directory = os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)
        self.read_only = read_only
        self.fallback = fallback
        self.primary = primary
        if read_only:
            logging.getLogger("absl").addFilter(_READ_ONLY_NOTE)  # once: a set of filters
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
                # In the background thread, before the step directory is renamed into place:
                # a committed step always holds its checksums.
                async_options=ocp.AsyncOptions(post_finalization_callback=self._record_checksums),
            )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=(_STATE, _DATA, _LOOP)
        )
        self._pending_step: int | None = None  # the step of the save that may still be running
        self._saving_step: int | None = None  # the step whose files _record_checksums hashes
        self._failed = False  # a failed save was reported (CheckpointSaveError)
        self._quiet = _QuietOrbaxSaveErrors()
        logging.getLogger("absl").addFilter(self._quiet)
        if not read_only:
            _quiet_failed_save_aftermath(failed=False)

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
        if self._pending_step is not None:
            # orbax's save would wait for it anyway; waiting here names its step if it failed.
            self.wait_until_finished()
        args = ocp.args.Composite(
            **{
                _STATE: ocp.args.StandardSave(state),
                _DATA: ocp.args.JsonSave(_encode_data_state(data_state)),
                _LOOP: ocp.args.JsonSave(loop_state or {}),
            }
        )
        self._saving_step = step
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

    def failed_save(self) -> CheckpointSaveError | None:
        """The CheckpointSaveError of the pending save if it failed (waiting for it), else None:
        on a full disk another write (metrics, a summary) may fail first, and the failed save
        is then the error to report."""
        try:
            self.wait_until_finished()
        except CheckpointSaveError as error:
            return error
        return None

    def _save_failed(self, step: int, error: Exception) -> CheckpointSaveError:
        self._failed = True
        _quiet_failed_save_aftermath(failed=True)
        _wait_for_orbax_writes()
        # The half-written step: never a checkpoint, and its space may be what the summary needs.
        for partial in glob.glob(os.path.join(self.directory, f"{step}.orbax-checkpoint-tmp*")):
            shutil.rmtree(partial, ignore_errors=True)
        latest = self.latest_step()
        kept = f"step {latest} is the last good checkpoint" if latest is not None else "none"
        cause = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        path = os.path.join(self.directory, str(step))
        return CheckpointSaveError(f"checkpoint {path} could not be saved ({cause[:300]}); {kept}")

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, Any] | None:
        """Returns `(state, data_state)` from `step` (default: latest), or None if none exist.

        `abstract_state` has the structure of the saved state, with leaves that are
        `jax.ShapeDtypeStruct`s (e.g. `jax.eval_shape(init_fn, ...)`) or concrete arrays;
        restored values are bit-identical to the saved ones. A damaged checkpoint raises
        CorruptCheckpointError, or (the latest, with `fallback`) gives way to the one before.
        """
        for candidate in [step] if step is not None else self.all_steps()[::-1]:
            try:
                return self._restore_step(abstract_state, candidate)
            except CorruptCheckpointError as error:
                if step is not None or not self.fallback:
                    raise
                self._set_aside(candidate, error)
        return None

    def _restore_step(self, abstract_state: Any, step: int) -> tuple[Any, Any]:
        self.verify(step)
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

    def verify(self, step: int) -> None:
        """Raises CorruptCheckpointError naming the files of `step` whose bytes differ from the
        checksums recorded at its save (or that are missing); checkpoints written before the
        record existed, or whose writer died before recording it, pass unchecked."""
        record = os.path.join(self.directory, str(step), CHECKSUMS_FILE)
        try:
            with open(record) as f:
                expected = json.load(f)["sha256"]
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError) as error:
            raise CorruptCheckpointError(self._unreadable(step, error, record)) from None
        root = os.path.join(self.directory, str(step))
        for name, digest in sorted(expected.items()):
            path = os.path.join(root, name)
            try:
                actual = _sha256(path)
            except FileNotFoundError:
                raise CorruptCheckpointError(
                    self._unreadable(step, FileNotFoundError("missing"), path)
                ) from None
            if actual != digest:
                cause = ValueError(f"its SHA-256 differs from the one recorded in {CHECKSUMS_FILE}")
                raise CorruptCheckpointError(self._unreadable(step, cause, path))

    def _record_checksums(self) -> None:
        """orbax's post-finalization callback: writes CHECKSUMS_FILE into the directory of the
        save in progress (still `<step>.orbax-checkpoint-tmp*` where orbax commits by rename).
        orbax's own bookkeeping files, which it rewrites when it commits, are left out."""
        step = self._saving_step
        if not self.primary or step is None:
            return
        pending = glob.glob(os.path.join(self.directory, f"{step}.orbax-checkpoint-tmp*"))
        root = pending[0] if pending else os.path.join(self.directory, str(step))
        digests = {}
        for directory, _, files in os.walk(root):
            for name in files:
                path = os.path.join(directory, name)
                digests[os.path.relpath(path, root)] = _sha256(path)
        for name in _UNCHECKED_FILES:
            digests.pop(name, None)
        with open(os.path.join(root, CHECKSUMS_FILE), "w") as f:
            json.dump({"sha256": digests}, f, indent=1, sort_keys=True)

    def _set_aside(self, step: int, error: CorruptCheckpointError) -> None:
        """fallback=True: moves the damaged `step` out of orbax's sight (a writer) or skips it
        (a reader), saying so, so that the latest step is the one before it."""
        path = os.path.join(self.directory, str(step))
        if self.read_only:
            where = "skipped"
        else:
            damaged = os.path.join(os.path.dirname(self.directory), DAMAGED_DIR)
            os.makedirs(damaged, exist_ok=True)
            target = os.path.join(damaged, str(step))
            shutil.rmtree(target, ignore_errors=True)
            os.replace(path, target)
            self._manager.reload()
            where = f"moved to {target}"
        print(f"note: {error}; it is {where} (train.restore_fallback)", file=sys.stderr)

    def _unreadable(self, step: int, error: Exception, file: str | None = None) -> str:
        """Names the checkpoint (and the damaged file, when known) and the way back to the one
        before it: move the step aside, or ask for the fallback. Never automatic: silently
        retraining from an older step would hide the damage (and, for a reader, give an older
        model than asked for)."""
        path = os.path.join(self.directory, str(step))
        earlier = [s for s in self.all_steps() if s < step]
        fallback = (
            f"move {path} out of {self.directory}, or set train.restore_fallback=true, to use "
            f"step {earlier[-1]}, the previous one"
            if earlier
            else "there is no earlier checkpoint: start again in a new --workdir"
        )
        cause = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        where = f" ({file}: {cause[:300]})" if file else f" ({cause[:300]})"
        return f"checkpoint {path} is damaged{where}; {fallback}"

    def restore_loop_state(self, step: int) -> dict[str, Any]:
        """The `loop_state` saved at `step`; {} for a checkpoint written without one."""
        loop = os.path.join(self.directory, str(step), _LOOP)
        if not os.path.isdir(loop):
            return {}
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**{_LOOP: ocp.args.JsonRestore()})
            )
        except Exception as error:  # a damaged JSON file: orbax raises what json raised
            raise CorruptCheckpointError(self._unreadable(step, error, loop)) from error
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
            try:
                self._manager.close()
            except _SAVE_ERRORS as error:
                # orbax raises a failed save again as it closes: once reported, it is not news.
                if not self._failed:
                    raise self._save_failed(self._saving_step, error) from error
            finally:
                logging.getLogger("absl").removeFilter(self._quiet)

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# How long a failed save waits for its writes still in flight (each fails at once on a full disk).
_IN_FLIGHT_WAIT_S = 60.0


def _wait_for_orbax_writes() -> None:
    """Waits (bounded) for the array writes of a failed save still running in orbax's
    background threads: orbax's wait ends at the first error (its step metadata, say), and the
    writes in flight would recreate the half-written step after it is deleted, and report their
    own errors after the Checkpointer that quiets them has closed."""
    from orbax.checkpoint._src.futures import future  # orbax's thread class, not public API

    deadline = time.monotonic() + _IN_FLIGHT_WAIT_S
    for thread in threading.enumerate():
        if isinstance(thread, future._SignalingThread) and thread is not threading.current_thread():
            with contextlib.suppress(Exception):  # its own error is the save's, reported once
                threading.Thread.join(thread, max(0.0, deadline - time.monotonic()))


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


_quiet = {"installed": False, "failed": False}


def _quiet_failed_save_aftermath(failed: bool) -> None:
    """Stops printing what a failed save does in background threads besides the one
    CheckpointSaveError that reports it: its writes still in flight report to an event loop
    orbax already closed (RuntimeError "Event loop is closed", a traceback each, possibly before
    the failure is noticed); once `failed`, those writes' own errors (OSError, tensorstore's
    ValueError), tensorboardX's writer thread on the same full disk, and orbax coroutines
    collected at exit. Errors of the main thread keep their tracebacks."""
    if failed and not _quiet["failed"]:
        _quiet["failed"] = True
        logging.getLogger("asyncio").addFilter(_QuietUnretrievedSaveErrors())
        logging.getLogger("absl").addFilter(_QuietOrbaxShutdownRaces())
    if _quiet["installed"]:
        return
    _quiet["installed"] = True

    def closed_loop(error: BaseException | None) -> bool:
        return isinstance(error, RuntimeError) and "Event loop is closed" in str(error)

    def aftermath(error: BaseException | None) -> bool:
        failed_too = _quiet["failed"] and isinstance(error, _SAVE_ERRORS + (ImportError,))
        return closed_loop(error) or failed_too

    excepthook, thread_hook, unraisable_hook = (
        sys.excepthook,
        threading.excepthook,
        sys.unraisablehook,
    )

    def quiet_excepthook(kind, value, traceback):
        if not closed_loop(value):
            excepthook(kind, value, traceback)

    def quiet_thread_hook(args):
        if not aftermath(args.exc_value):
            thread_hook(args)

    def quiet_unraisable_hook(unraisable):
        if not aftermath(unraisable.exc_value):
            unraisable_hook(unraisable)

    sys.excepthook = quiet_excepthook
    threading.excepthook = quiet_thread_hook
    sys.unraisablehook = quiet_unraisable_hook
