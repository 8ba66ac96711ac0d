"""Parses the flags of `python -m MODULE ARGS` commands without running them.

    python tests/docs_commands.py < commands.json

reads [{"module": ..., "args": [...], "partial": bool}, ...] and prints one JSON list: per
command, null when its flags parse, else the error. Run from the repository root. Each command's
module runs as `__main__` up to the point where it parses its flags, then stops: absl's
`app.run` is replaced by a parse of `sys.argv` (unknown flags, bad values, config files and
`--config.x.y` overrides are checked, required flags too unless `partial`), and argparse's
`parse_args` stops the module right after parsing. A module that reaches neither is not run at
all. All commands share one process, so the libraries are imported once; the flags a command
defines are removed before the next.
"""

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import runpy
import sys

from absl import app, flags

# The messages of a missing required flag (absl) or argument (argparse): accepted in `partial`
# mode, for a command quoted inline in prose ("`python -m benchmarks.scale` prints ...").
_MISSING_REQUIRED = ("must have a value other than None", "the following arguments are required")


class _Parsed(Exception):
    """The module's flags parsed: stop it before its main runs."""


def _absl_run(main, argv=None, **unused):
    del main, unused
    flags.FLAGS(sys.argv if argv is None else argv)
    for name in flags.FLAGS:
        value = flags.FLAGS[name].value
        if type(value).__name__ == "_ErrorConfig":  # a config file that did not load
            value.to_dict()  # raises the loading error
    raise _Parsed


_argparse_parse_args = argparse.ArgumentParser.parse_args
_argparse_parse_known_args = argparse.ArgumentParser.parse_known_args
_inside_parse_args = []


def _parse_args(self, args=None, namespace=None):
    _inside_parse_args.append(True)
    try:
        _argparse_parse_args(self, args, namespace)
    finally:
        _inside_parse_args.pop()
    raise _Parsed


def _parse_known_args(self, args=None, namespace=None):
    result = _argparse_parse_known_args(self, args, namespace)
    if _inside_parse_args:  # parse_args checks what is left over itself
        return result
    raise _Parsed


def _source(module: str) -> str | None:
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package runs its __main__
        spec = importlib.util.find_spec(f"{module}.__main__")
        if spec is None:
            return None
    with open(spec.origin, encoding="utf-8") as f:
        source = f.read()
    # A __main__ that hands the process over to the command's module (transformer_jax/sweep/
    # __main__.py): that module's flags are the command's.
    handover = re.search(r"runpy\.run_module\(\s*[\"']([\w.]+)[\"']", source)
    return _source(handover.group(1)) if handover else source


def check(module: str, args: list[str], partial: bool) -> str | None:
    """None if `python -m module *args` would get past its flag parsing, else why not."""
    try:
        source = _source(module)
    except ModuleNotFoundError:
        source = None
    if source is None:
        return f"no module named {module}"
    if "app.run(" not in source and "parse_args(" not in source:
        return f"{module} parses no flags with absl's app.run or argparse's parse_args"
    defined = set(flags.FLAGS)
    flags.FLAGS.unparse_flags()
    stderr = io.StringIO()
    saved_argv = sys.argv
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        return f"{module} ran to its end without parsing its flags"
    except _Parsed:
        return None
    except SystemExit as exit_:
        message = stderr.getvalue().strip().splitlines()
        error = message[-1] if message else f"exit status {exit_.code}"
        if exit_.code in (0, None) or (partial and any(m in error for m in _MISSING_REQUIRED)):
            return None
        return error
    except flags.Error as error:
        if partial and any(m in str(error) for m in _MISSING_REQUIRED):
            return None
        return f"{type(error).__name__}: {error}"
    except Exception as error:  # e.g. a config file that fails to load
        return f"{type(error).__name__}: {error}"
    finally:
        sys.argv = saved_argv
        for name in set(flags.FLAGS) - defined:
            delattr(flags.FLAGS, name)


def main() -> None:
    sys.path[0] = os.getcwd()  # the repository's packages, not this file's folder
    app.run = _absl_run
    argparse.ArgumentParser.parse_args = _parse_args
    argparse.ArgumentParser.parse_known_args = _parse_known_args
    commands = json.load(sys.stdin)
    results = []
    for command in commands:
        sys.argv = [command["module"], *command["args"]]
        results.append(check(command["module"], command["args"], command["partial"]))
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
