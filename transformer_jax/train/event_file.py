"""A run's TensorBoard event file (tensorboardX), failing like every other write of the run.

tensorboardX writes events from a daemon thread fed by a queue of 10. When one of its writes
fails (a full disk) the thread dies with a traceback, the queue fills, and the next `put` of
the training thread blocks forever: a run that neither ends nor answers SIGTERM (the loop never
gets back to its signal check). Here the thread's write errors are kept instead (it lives on,
dropping events) and raised in the training thread, naming the file, at the next `add_scalar`
or at `close`; a put waits for room only while the thread is alive, a second at a time.
"""

import contextlib
import errno
import queue
import sys
import uuid

from transformer_jax.run_dir import shown

_PUT_WAIT_S = 1.0  # how long a put waits before checking the writer thread again


def _import_summary_writer():
    """tensorboardX's SummaryWriter, imported without PyTorch.

    tensorboardX imports torch whenever it is installed (the benchmarks install it), which adds
    ~1-2 s to the start-up of every run, for tensor conversions this logger never uses; a None
    entry in sys.modules makes that optional import fail as if torch were absent."""
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None
    try:
        from tensorboardX import SummaryWriter
    finally:
        if blocked:
            del sys.modules["torch"]
    return SummaryWriter


SummaryWriter = _import_summary_writer()


class EventFile:
    """One event file in `logdir`; `purge_step` tells TensorBoard to drop the steps from it on
    (those a resumed run logs again)."""

    def __init__(self, logdir: str, purge_step: int | None):
        # tensorboardX names files by the second; the suffix keeps a resumed run's file from
        # overwriting the crashed run's when both start in one second.
        self._writer = SummaryWriter(
            logdir=logdir, purge_step=purge_step, filename_suffix=f".{uuid.uuid4().hex[:8]}"
        )
        self._events = self._writer._get_file_writer().event_writer  # made by SummaryWriter
        records = self._events._ev_writer  # what the writer thread writes through
        self.path = records._file_name
        self.error: OSError | None = None  # the first write that failed
        records.write_event = self._kept(records.write_event)
        records.flush = self._kept(records.flush)
        self._events.add_event = self._put

    def _kept(self, write):
        def kept(*args):
            try:
                return write(*args)
            except OSError as error:
                self._fail(error)

        return kept

    def _fail(self, error: OSError) -> None:
        if self.error is None:
            cause = f"{type(error).__name__}: {error}"
            self.error = OSError(
                f"TensorBoard events file {shown(self.path)} could not be written ({cause})"
            )
            self.error.errno = error.errno

    def _put(self, event) -> None:
        """tensorboardX's `add_event`, never waiting on a writer thread that is gone."""
        while not self._events._closed:
            self.check()
            worker = self._events._worker
            if worker is None or not worker.is_alive():
                self._fail(OSError(errno.EPIPE, "its writer thread has stopped"))
                self.check()
            with contextlib.suppress(queue.Full):
                self._events._event_queue.put(event, timeout=_PUT_WAIT_S)
                return

    def check(self) -> None:
        """Raises the first write of the writer thread that failed, if one did."""
        if self.error is not None:
            raise self.error

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.check()
        self._writer.add_scalar(tag, value, step)

    def close(self) -> None:
        """Flushes and closes the file; raises the first write that failed. Once one failed the
        events left are lost either way: the thread is stopped and the file closed without a
        flush, and tensorboardX's own flush at exit (an atexit hook) is told the file is closed
        rather than fail again with a traceback, or wait on a thread that is gone."""
        worker = self._events._worker
        if self.error is None and (worker is None or not worker.is_alive()):
            self._fail(OSError(errno.EPIPE, "its writer thread has stopped"))
        if self.error is None:
            try:
                self._writer.close()
            except OSError as error:
                self._fail(error)
        if self.error is None:
            return
        if worker is not None and worker.is_alive():
            with contextlib.suppress(queue.Full):
                self._events._event_queue.put(worker._shutdown_signal, timeout=_PUT_WAIT_S)
            worker.join(_PUT_WAIT_S)
        with contextlib.suppress(OSError, ValueError):  # its buffer cannot be flushed
            self._events._ev_writer._py_recordio_writer.close()
        self._events._closed = True
        raise self.error
