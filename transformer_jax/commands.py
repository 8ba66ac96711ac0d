"""What every command line does with an error: one clean line for the user's, a traceback for ours.

A ValueError (bad config, flag, input or checkpoint: the message names the field and the fix) or
an OSError (a bad path, a full disk) prints `<command>: error: <message>` on stderr and exits
with USER_ERROR_EXIT_CODE; anything else is a bug and keeps its traceback. The sweep command
does the same in transformer_jax/sweep/__main__.py.
"""

import functools
import sys
from collections.abc import Callable

USER_ERROR_EXIT_CODE = 2  # as argparse and absl exit for bad flags


def one_line_errors(name: str) -> Callable:
    """Decorates an absl `main(argv)` so user errors print one line (see the module doc)."""

    def decorate(main: Callable) -> Callable:
        @functools.wraps(main)
        def wrapped(argv):
            try:
                return main(argv)
            except (ValueError, OSError) as error:
                print(f"{name}: error: {error}", file=sys.stderr)
                sys.exit(USER_ERROR_EXIT_CODE)

        return wrapped

    return decorate
