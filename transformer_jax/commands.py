"""What every command line does with an error: one clean line for the user's, a traceback for ours;
and how a command line is recorded (`recorded_command`).

A ValueError (bad config, flag, input or checkpoint: the message names the field and the fix) or
an OSError (a bad path, a full disk) prints `<command>: error: <message>` on stderr and exits
with USER_ERROR_EXIT_CODE; anything else is a bug and keeps its traceback. The sweep command
does the same in transformer_jax/sweep/__main__.py.
"""

import functools
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence

USER_ERROR_EXIT_CODE = 2  # as argparse and absl exit for bad flags
# The repository: the directory holding this package (configs/, experiments/, results/).
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def recorded_command(module: str, argv: Sequence[str], repository: str | None = None) -> str:
    """`python -m module argv...` as the user typed it, for a report or sweep.json: an absolute
    path inside the repository becomes relative to it (`--workdir=results/x`), so that a
    committed report names no directory of the machine that ran it; everything else is kept.

    argv: the arguments after the program name (sys.argv[1:]); a path may be a flag's value
    (`--workdir=/r/x`) or an argument of its own (`--workdir /r/x`).
    """
    repository = repository or REPOSITORY
    return shlex.join(["python", "-m", module, *(_in_repository(a, repository) for a in argv)])


def recorded_shell_command(
    argv: Sequence[str], cwd: str, env: Mapping[str, str], repository: str | None = None
) -> str:
    """`cd CWD && VAR=value ... argv`, the line command.txt and run.log record for a run. Run
    from inside the repository, the line is written from there: paths inside `cwd` relative to
    it, the `cd` dropped at the repository's root and the interpreter named `python`, so that a
    committed record names no directory of the machine that ran it. Elsewhere it is absolute."""
    where = _in_repository(cwd, repository or REPOSITORY)
    if os.path.isabs(where):
        prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())
        return f"cd {shlex.quote(cwd)} && {prefix}{shlex.join(argv)}"
    prefix = "".join(f"{k}={shlex.quote(_in_repository(v, cwd))} " for k, v in env.items())
    command = shlex.join(["python", *(_in_repository(a, cwd) for a in argv[1:])])
    return prefix + command if where == "." else f"cd {shlex.quote(where)} && {prefix}{command}"


def launch_dir(repository: str | None = None) -> str:
    """The current directory as a record names it: relative to the repository when inside it
    ("." for its root), else absolute."""
    return _in_repository(os.getcwd(), repository or REPOSITORY)


def _in_repository(arg: str, repository: str) -> str:
    flag, equals, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    if not os.path.isabs(value):
        return arg
    relative = os.path.relpath(os.path.normpath(value), repository)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return arg  # outside the repository: as typed
    return f"{flag}{equals}{relative}"


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
