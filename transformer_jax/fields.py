"""Checks and conversions shared by every typed config (model, train, data).

A typed config is a frozen dataclass, possibly holding other typed configs (its sub-configs).
Its dictionary form is nested like the dataclasses, which is also how it appears in
`config.json` and on the command line (`--config.model.norm.kind=dyt`). Every check names the
dotted field, the value and what would be valid.
"""

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any


def check_choice(field: str, value, choices) -> None:
    if value not in tuple(choices):
        raise ValueError(f"{field}={value!r} is not valid; choose one of {list(choices)}")


def check_bool(field: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} must be True or False")


# The largest step count, step interval or length a run may have: the step counter and the
# positions are int32 on the device, so a larger value would wrap around.
INT32_MAX = 2**31 - 1
# Seeds are read as 32-bit unsigned ints (jax.random.PRNGKey, the data order): 2**32 would
# train seed 0's run again.
SEED_LIMIT = 2**32


def check_int(field: str, value, minimum: int, maximum: int = INT32_MAX) -> None:
    """An int in [minimum, maximum]; the default maximum is INT32_MAX, the device's int32."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field}={value!r} must be an integer >= {minimum}")
    if value > maximum:
        raise ValueError(
            f"{field}={value!r} is too large: valid are integers from {minimum} to {maximum}"
            + (" (the device counts in int32)" if maximum == INT32_MAX else "")
        )


VALID_SEEDS = f"integers from 0 to {SEED_LIMIT - 1} (2**32 - 1; larger seeds repeat smaller ones)"


def is_seed(value) -> bool:
    """Whether `value` is a seed: an int in [0, 2**32), the range every seed of a run is read in."""
    return not isinstance(value, bool) and isinstance(value, int) and 0 <= value < SEED_LIMIT


def check_seed(field: str, value) -> None:
    if not is_seed(value):
        raise ValueError(f"{field}={value!r} is not a valid seed; valid: {VALID_SEEDS}")


# The kernel's views of processes, devices and drivers: no run, sweep or dataset can be written
# there.
KERNEL_DIRS = ("/proc", "/sys", "/dev")


def check_directory(named: str, value: str, valid: str) -> None:
    """Refuses (ValueError, one line: `named`, the value and `valid`) a directory path that is
    empty or blank (an unset shell variable), a file or under one, or under /proc, /sys or
    /dev. A directory that does not exist yet is valid, and so is a URL (gs://...), which the
    local filesystem cannot check. `named` is the flag or field as the user wrote it
    (`--workdir`, `data.data_dir`)."""
    if not value.strip():
        raise ValueError(f"{named}={value!r} is empty; {valid}")
    if "://" in value:
        return
    path = os.path.abspath(os.path.expanduser(value))
    for kernel in KERNEL_DIRS:
        if path == kernel or path.startswith(kernel + os.sep):
            raise ValueError(f"{named}={value} is under {kernel}, which holds no files; {valid}")
    probe = path
    while not os.path.isdir(probe):
        if os.path.lexists(probe):
            what = "is a file" if probe == path else f"is inside {probe}, a file"
            raise ValueError(f"{named}={value} {what}, not a directory; {valid}")
        probe = os.path.dirname(probe)


def check_float(
    field: str,
    value,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
) -> None:
    """A finite number within the given bounds (NaN and infinities never pass)."""
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    valid = valid and math.isfinite(value)
    bounds = []
    for bound, holds, words in (
        (above, lambda b: value > b, "> {}"),
        (at_least, lambda b: value >= b, ">= {}"),
        (below, lambda b: value < b, "< {}"),
        (at_most, lambda b: value <= b, "<= {}"),
    ):
        if bound is not None:
            bounds.append(words.format(bound))
            valid = valid and holds(bound)
    if not valid:
        rule = " and ".join(bounds)
        raise ValueError(f"{field}={value!r} must be a finite number{' ' + rule if rule else ''}")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def sub_config(cls):
    """A field holding a sub-config, created with its defaults."""
    return dataclasses.field(default_factory=cls, metadata={"config": cls})


def optional_sub_config(cls):
    """A field holding a sub-config or None (the feature is off)."""
    return dataclasses.field(default=None, metadata={"config": cls, "optional": True})


def build(cls, fields: Mapping[str, Any], prefix: str):
    """`cls` from its dictionary form, sub-configs included; unknown fields are rejected."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise ValueError(
            f"unknown config field(s) {[f'{prefix}.{u}' for u in unknown]}; "
            f"valid fields of {prefix}: {sorted(known)}"
        )
    values = {}
    for name, value in fields.items():
        sub = known[name].metadata.get("config")
        if sub is not None and isinstance(value, Mapping):
            value = build(sub, value, f"{prefix}.{name}")
        values[name] = value
    return cls(**values)


def to_dict(config) -> dict:
    """The nested dictionary form of a typed config (None sub-configs stay None)."""
    return {
        f.name: to_dict(v) if dataclasses.is_dataclass(v) else v
        for f in dataclasses.fields(config)
        for v in [getattr(config, f.name)]
    }


def override(config, changes: Mapping[str, Any], prefix: str):
    """A copy of `config` with dotted-path changes, as on the command line and in sweep files:
    `override(model, {"norm.kind": "dyt", "d_model": 64})`."""
    nested: dict[str, dict] = {}
    direct = {}
    for path, value in changes.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    known = {f.name: f for f in dataclasses.fields(config)}
    for head, sub_changes in nested.items():
        if head not in known or "config" not in known[head].metadata:
            raise ValueError(
                f"{prefix}.{head} is not a sub-config; valid: "
                f"{sorted(n for n, f in known.items() if 'config' in f.metadata)}"
            )
        current = direct.get(head, getattr(config, head))
        if current is None:
            current = known[head].metadata["config"]()
        direct[head] = override(current, sub_changes, f"{prefix}.{head}")
    unknown = sorted(set(direct) - set(known))
    if unknown:
        raise ValueError(
            f"unknown config field(s) {[f'{prefix}.{u}' for u in unknown]}; "
            f"valid fields of {prefix}: {sorted(known)}"
        )
    return dataclasses.replace(config, **direct)


def flatten(tree: dict, prefix: str = "") -> dict:
    """{"norm": {"kind": "dyt"}} -> {"norm.kind": "dyt"}; None sub-configs stay one field.
    Tuples become lists, as config.json stores them, so a stored and a fresh config compare."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out
