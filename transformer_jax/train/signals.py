"""Turn SIGTERM/SIGINT into a flag so the loop can checkpoint and exit cleanly.

Usage::

    with StopOnSignal() as stop:
        for step in ...:
            ...
            if stop.stop_requested():
                checkpointer.save(step, state, data_state, force=True)
                break

A second SIGINT (Ctrl-C pressed again) restores the previous handlers and raises
KeyboardInterrupt, an escape hatch if the loop hangs; orbax's atomic save still
protects the checkpoints already written.
"""

import signal
import types
from collections.abc import Sequence


class StopOnSignal:
    """Context manager: while active, the given signals set a flag instead of killing us.

    Must be entered on the main thread (Python only delivers signals there).
    Previous handlers are restored on exit.
    """

    def __init__(self, signums: Sequence[int] = (signal.SIGTERM, signal.SIGINT)):
        self._signums = tuple(signums)
        self._previous: dict[int, object] = {}
        self.received: int | None = None

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        del frame
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            self._restore()
            raise KeyboardInterrupt
        self.received = signum

    def stop_requested(self) -> bool:
        """True once any of the signals has arrived."""
        return self.received is not None

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def __enter__(self) -> "StopOnSignal":
        for signum in self._signums:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._restore()
