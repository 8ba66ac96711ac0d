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
are told apart. Outside a git checkout (an installed package) nothing is checked and the commit
is "unknown".
"""

import dataclasses
import hashlib
import os
import subprocess
from typing import Any

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

    def to_json(self) -> dict[str, Any]:
        return {"git_commit": self.commit, "diff_sha256": self.diff_sha256}


def _git(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)


def read(cwd: str = ".") -> CodeVersion:
    """The code version of the checkout at `cwd` (see the module docstring)."""
    try:
        head = _git(["rev-parse", "HEAD"], cwd)
        if head.returncode != 0:
            return CodeVersion(UNKNOWN)
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
    except (OSError, subprocess.TimeoutExpired):
        return CodeVersion(UNKNOWN)
    return CodeVersion(head.stdout.decode().strip(), changed, digest.hexdigest())


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
