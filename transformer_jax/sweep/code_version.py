"""One code version per sweep: the commit a sweep's runs are launched at, and its refusal of a
tree with uncommitted changes to the code that trains them.

A sweep whose runs were trained at several commits, or from uncommitted edits, compares
variants of different programs: the same baseline config can score differently between two such
launches. So before any run starts, the runner reads `git status` of the launch directory (the
repository root, from which `python -m transformer_jax.main` imports the package and reads the
config and sweep files) and refuses uncommitted changes, untracked files included, under
TRACKED_DIRS unless `--allow_dirty`. Each launched run records the version in its code.json
(run_dir.CODE_FILE): the commit and, from a dirty tree, the sha256 of `git diff HEAD` of those
directories (followed by the path and bytes of each untracked file there), so two dirty launches
are told apart.

Each run's record is read when the run starts (sweep/launcher.py `Launch`), not when the sweep
is launched: code edited while a sweep runs shows in the runs started after the edit (their
diff_sha256), and the report marks them (uncommitted, mixed code).

Where the check cannot run (no git on PATH; a launch directory outside a git checkout, or
holding none of TRACKED_DIRS: launched outside the checkout) the launch says so in one line,
and each run records the commit as "unknown" and, instead, files_sha256: the sha256 of the
code's files (the imported package's and the launch directory's TRACKED_DIRS, each path and its
bytes, in path order), so that runs of different code are still told apart.
"""

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
from typing import Any

import transformer_jax

# The directories whose uncommitted changes make a sweep's runs a different program.
TRACKED_DIRS = ("transformer_jax", "configs", "experiments")
UNKNOWN = "unknown"
_SHOWN = 4  # changed paths named in the refusal


@dataclasses.dataclass(frozen=True)
class CodeVersion:
    """commit: `git rev-parse HEAD` ("unknown" outside git); changed: the paths under
    TRACKED_DIRS with uncommitted changes; diff_sha256: the hash of those changes (None when
    there are none)."""

    commit: str
    changed: tuple[str, ...] = ()
    diff_sha256: str | None = None
    files_sha256: str | None = None  # where git could not check: the code's files (docstring)
    unchecked: str | None = None  # why the dirty-tree check could not run

    def to_json(self) -> dict[str, Any]:
        out = {"git_commit": self.commit, "diff_sha256": self.diff_sha256}
        if self.files_sha256 is not None:
            out["files_sha256"] = self.files_sha256
        return out


def _git(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)


def read(cwd: str = ".") -> CodeVersion:
    """The code version of the checkout at `cwd` (see the module docstring)."""
    if shutil.which("git") is None:
        return _unchecked(cwd, "no git on PATH")
    if not any(os.path.isdir(os.path.join(cwd, d)) for d in TRACKED_DIRS):
        where = os.path.abspath(cwd)
        return _unchecked(cwd, f"launched outside the checkout: {where} holds no {TRACKED_DIRS}")
    try:
        head = _git(["rev-parse", "HEAD"], cwd)
        if head.returncode != 0:
            return _unchecked(cwd, f"{os.path.abspath(cwd)} is not in a git checkout")
        status = _git(["status", "--porcelain", "--untracked-files=all", "--", *TRACKED_DIRS], cwd)
        changed = tuple(line[3:] for line in status.stdout.decode().splitlines() if line)
        if not changed:
            return CodeVersion(head.stdout.decode().strip())
        digest = hashlib.sha256(_git(["diff", "HEAD", "--binary", "--", *TRACKED_DIRS], cwd).stdout)
        untracked = _git(
            ["ls-files", "--others", "--exclude-standard", "-z", "--", *TRACKED_DIRS], cwd
        )
        for path in sorted(p for p in untracked.stdout.decode().split("\0") if p):
            digest.update(path.encode() + b"\0")
            with open(os.path.join(cwd, path), "rb") as f:
                digest.update(f.read())
    except (OSError, subprocess.TimeoutExpired) as error:
        return _unchecked(cwd, f"git failed ({type(error).__name__}: {error})")
    return CodeVersion(head.stdout.decode().strip(), changed, digest.hexdigest())


def _unchecked(cwd: str, reason: str) -> CodeVersion:
    """The version recorded where git cannot check the tree: "unknown", and the sha256 of the
    code's files (the module docstring)."""
    roots = [os.path.dirname(os.path.abspath(transformer_jax.__file__))]
    roots += [os.path.join(cwd, d) for d in TRACKED_DIRS[1:] if os.path.isdir(os.path.join(cwd, d))]
    files = sorted(
        os.path.join(root, name)
        for top in roots
        for root, dirs, names in os.walk(top)
        if "__pycache__" not in root
        for name in names
        if not name.endswith(".pyc")
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(os.path.relpath(path, os.path.dirname(roots[0])).encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read())
    return CodeVersion(UNKNOWN, files_sha256=digest.hexdigest(), unchecked=reason)


def checked(allow_dirty: bool, cwd: str = ".") -> CodeVersion:
    """The code version at `cwd`; a ValueError naming the changed paths when the tree has
    uncommitted changes under TRACKED_DIRS and `allow_dirty` is False."""
    version = read(cwd)
    if version.changed and not allow_dirty:
        shown = ", ".join(version.changed[:_SHOWN])
        more = len(version.changed) - _SHOWN
        raise ValueError(
            f"uncommitted changes to {', '.join(d + '/' for d in TRACKED_DIRS)}: {shown}"
            + (f" and {more} more" if more > 0 else "")
            + "; commit them so that every run of the sweep trains one code version, or pass "
            "--allow_dirty (each run then records the diff's sha256)"
        )
    return version


def say_unchecked(version: CodeVersion) -> None:
    """The one line on stderr saying why the dirty-tree check could not run, if it could not:
    said once the launch is accepted (sweep/runner.py `locked_sweep`), so that a refused launch
    prints its error line alone."""
    if version.unchecked is not None:
        print(
            f"warning: the dirty-tree check cannot run ({version.unchecked}); each run records "
            f"git_commit {UNKNOWN!r} and files_sha256, the sha256 of the code's files, instead",
            file=sys.stderr,
            flush=True,
        )
