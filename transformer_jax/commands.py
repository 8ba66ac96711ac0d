"""What every command line does with an error: one clean line for the user's, a traceback for ours;
and how a command line is recorded (`recorded_command`).

Flags are parsed before `main` runs: every command's `app.run(main,
flags_parser=parse_flags(name))` turns a flag absl or ml_collections refuses (an unknown flag or
`--config.` field, a value of the wrong type, a config argument the config file rejects) into the
same one line and exit status. The parser also chooses the platforms JAX starts on before any
backend starts: the CPU alone where libtpu is installed without a TPU to drive
(environment.skip_absent_tpu), so that CPU runs print none of libtpu's start-up errors, and
quiets TFDS's routine warnings (library_logs.py), which a sweep's run.log would otherwise hold.

Every command's `--workdir` is checked as it is parsed (`check_workdir`).

A ValueError (bad config, flag, input or checkpoint: the message names the field and the fix) or
an OSError (a bad path, a full disk) prints `<command>: error: <message>` on stderr and exits
with USER_ERROR_EXIT_CODE; anything else is a bug and keeps its traceback.
"""

import difflib
import functools
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence

from transformer_jax import environment, library_logs
from transformer_jax.fields import check_directory

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


def parse_flags(name: str) -> Callable[[list[str]], list[str]]:
    """An absl `flags_parser` for `app.run`: parses argv like absl, but a refused flag prints
    `<name>: error: <message>` (the flag, its value and why) and exits USER_ERROR_EXIT_CODE
    instead of absl's "FATAL Flags parsing error" (exit 1) or a traceback."""
    from absl import flags

    def parse(argv: list[str]) -> list[str]:
        environment.skip_absent_tpu()
        library_logs.quiet_library_logs()  # before any library logs into the command's output
        try:
            remaining = flags.FLAGS(argv)
            _raise_unloaded_config(flags.FLAGS)
            if "workdir" in flags.FLAGS and flags.FLAGS["workdir"].value is not None:
                check_workdir(flags.FLAGS["workdir"].value)
            return remaining
        except ValueError as error:  # check_workdir
            message = str(error)
        except flags.UnrecognizedFlagError as error:
            message = f"--{error.flagname} is not a flag"
            if error.flagname.startswith("config."):
                message = _unknown_override(error.flagname, argv)
            elif "Did you mean:" in str(error):  # absl's suggestion of the nearest flags
                near = str(error).split("Did you mean:", 1)[1].strip(" ?")
                message += f"; did you mean --{near.replace(', ', ', --')}?"
        except SyntaxError as error:  # --config=FILE that is not Python (a README)
            config = next((a for a in argv if a.startswith("--config=")), "--config")
            message = (
                f"{config} is not a Python config file ({error.msg}, line {error.lineno}); "
                "valid: a .py file defining get_config(), e.g. --config=configs/algorithmic.py:copy"
            )
        except flags.Error as error:
            # A config file's own ValueError comes inside absl's message with its traceback:
            # its last line is what the user needs.
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            message = lines[-1].removeprefix("ValueError: ") if lines else type(error).__name__
            if "invalid literal for int()" in message:  # an int field given abc, 1e9 or 0.5
                message += f"; valid: {_VALID_INT}"
        except (AttributeError, KeyError) as error:  # ml_collections: an override of no field
            if isinstance(error, AttributeError) and error.name == "get_config":
                # A Python file without get_config(): a sweep file, a module of the package.
                config = next((a for a in argv if a.startswith("--config=")), "--config")
                message = (
                    f"{config} defines no get_config(); valid: a config file, e.g. "
                    "--config=configs/algorithmic.py:copy (a sweep file, defining get_sweep(), "
                    "runs with python -m transformer_jax.sweep --sweep=FILE)"
                )
            else:
                bad = next((a for a in argv if a.startswith("--config.")), "--config")
                message = _unknown_override(bad[2:].split("=", 1)[0], argv)
            del error
        except OSError as error:  # a config file that cannot be read, e.g. a missing one
            message = _unreadable_config(error, argv)
        print(f"{name}: error: {message}", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT_CODE)

    return parse


def check_workdir(value: str, flag: str = "--workdir") -> None:
    """Refuses (ValueError, one line naming `flag`) a workdir that is empty or blank (an unset
    shell variable would put the run in the current directory), a file or under one, or under
    /proc, /sys or /dev (fields.check_directory). A directory that does not exist yet is
    valid."""
    check_directory(
        flag, value, "valid: a directory path, new or existing, e.g. --workdir=runs/copy"
    )


def _unknown_override(named: str, argv: Sequence[str]) -> str:
    """`--config.a.b: why`, for the first `--config.` override of argv that names no field: the
    flag absl or ml_collections names may be a valid override before it."""
    overrides = [a[2:].split("=", 1)[0] for a in argv if a.startswith("--config.")]
    for dotted in [*overrides, named]:
        why = _unknown_field(dotted, argv)
        if why != _NO_SUCH_FIELD:
            return f"--{dotted}: {why}"
    return f"--{named}: {_NO_SUCH_FIELD}"


def _raise_unloaded_config(values) -> None:
    """Raises now the error of a config file ml_collections failed to load (a missing file):
    it keeps the error in a stand-in config and raises it only when the config is first read."""
    for name in values:
        value = values[name].value
        if type(value).__name__ == "_ErrorConfig":
            raise OSError(vars(value)["_error"])


def _unreadable_config(error: OSError, argv: Sequence[str]) -> str:
    """`--config=FILE: why` in one line (ml_collections lists every path it tried)."""
    config = next((a for a in argv if a.startswith("--config=")), "--config")
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{config}: {lines[-1] if lines else type(error).__name__}"


# What an integer field takes: `1e9` is a float to Python, so a large size must be written out.
_VALID_INT = "an integer, written out in digits (1000000000, not 1e9)"

_NO_SUCH_FIELD = "the config has no such field; check its spelling against the config file"


def _unknown_field(dotted: str, argv: Sequence[str]) -> str:
    """Why `config.a.b` is not a field: the part that does not exist and what does there."""
    from absl import flags

    try:
        flag = flags.FLAGS["config"]
    except KeyError:
        return _NO_SUCH_FIELD
    node = flag.value
    config_file = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), None)
    if node is None and config_file:
        # ml_collections applies an override while parsing --config and keeps no value when it
        # fails: the fields come from loading the config file again (it loaded once already).
        node = flag.parser.parse(config_file)
    path = dotted.split(".")[1:]
    for depth, part in enumerate(path):
        keys = list(node.keys()) if hasattr(node, "keys") else None
        if keys is None:
            break
        if part not in keys:
            where = ".".join(["config", *path[:depth]])
            # Only on this error path: transformer_jax.config imports JAX, which commands that
            # start without it (the sweep) must not pay for.
            from transformer_jax.config.eval_blocks import moved_field

            moved = moved_field(part) if path[:depth] == ["train"] else None
            if moved is not None:
                return f"{where}.{part} is now {moved}: set --config.{moved}"
            # The nearest names, as absl suggests for a misspelt flag (learning_rat).
            near = difflib.get_close_matches(part, [str(k) for k in keys], n=3)
            guess = "".join(f"--{where}.{name}, " for name in near).removesuffix(", ")
            guess = f" (did you mean {guess}?)" if near else ""
            return f"{where} has no field {part!r}{guess}; its fields: {', '.join(sorted(keys))}"
        node = node[part]
    return _NO_SUCH_FIELD
