"""Factorial sweeps: variants as the cells of a grid of factors.

Most claims are about one factor with another held fixed ("removing 1/sqrt(d_k) hurts more at
larger d_k" is scale x head size). A sweep can therefore declare factors instead of (or beside)
a flat list of variants:

    Factor("scale", {"sqrt_dk": {}, "none": {"model.attention.scale": "none"}})
    Factor("d_k", {"dk16": {}, "dk64": {"model.attention.num_heads": 1}},
           reference_in_name=False)

Each factor has ordered, named levels (each a dict of config overrides) and a reference level
(the first unless named). A cell picks one level of every factor; its overrides are the union
of its levels' overrides (two factors setting one key to different values is an error naming
both) and its variant name joins its level names in factor order ("dk64_none"), leaving out the
reference level of a factor declared with reference_in_name=False ("none" at d_k = 16). The
sweep trains the full grid, or the cells it lists, with the same seeds in every cell.

A SplitFactor is a factor the runs do not train: its levels are evaluation splits of the same
runs (e.g. the training lengths "test" and the longer "test_long"), so "rotary generalises to
longer inputs" becomes encoding x length, paired by seed within each run.
"""

import dataclasses
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DOTTED_KEY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_SCALARS = (bool, int, float, str)

Cell = tuple[str, ...]  # one level name per (trained) factor, in factor order


def check_value(where: str, value: Any) -> None:
    """Raises ValueError unless value can be written as a config flag and parsed back exactly."""
    if isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, list | tuple):
                raise ValueError(f"{where} = {value!r}: nested tuples are not supported")
            check_value(where, item)
        return
    if not isinstance(value, _SCALARS):
        raise ValueError(
            f"{where} = {value!r} has type {type(value).__name__}; valid types: bool, int, "
            "float, str or a tuple of those (None cannot be passed as a config flag override)"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} = {value!r}: must be a finite number")


def check_overrides_dict(where: str, overrides: Any) -> dict[str, Any]:
    """Validates one set of dotted-key overrides; returns it with lists made tuples."""
    if not isinstance(overrides, Mapping):
        raise ValueError(f"{where} = {overrides!r}: must be a dict of overrides")
    for key, value in overrides.items():
        if not isinstance(key, str) or not _DOTTED_KEY.fullmatch(key):
            raise ValueError(
                f"{where} key {key!r}: must be a dotted config path like 'model.attention.scale'"
            )
        if key == "seed":
            raise ValueError(f"{where} overrides 'seed'; seeds are set by the sweep's seeds field")
        check_value(f"{where}[{key!r}]", value)
    return {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}


def _check_name(what: str, name: Any) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"{what} {name!r}: must match {NAME.pattern}")


@dataclasses.dataclass(frozen=True)
class Factor:
    """A trained factor: named levels, each a dict of config overrides.

    Attributes:
      name: the factor's name in tables, e.g. "scale".
      levels: level name -> overrides, in display order, e.g. {"sqrt_dk": {}, "none": {...}}.
      reference: the level every other level is compared with (default: the first).
      reference_in_name: whether the reference level's name is part of cell names; False keeps
        the names of a flat sweep that grew a factor ("none", "dk64_none").
    """

    name: str
    levels: Mapping[str, Mapping[str, Any]]
    reference: str = ""
    reference_in_name: bool = True

    def __post_init__(self):
        _check_name("factor name", self.name)
        if not isinstance(self.levels, Mapping) or len(self.levels) < 2:
            raise ValueError(
                f"factor {self.name!r}: levels = {self.levels!r} must be a dict of at least two "
                "level name -> {dotted.key: value}"
            )
        levels = {}
        for level, overrides in self.levels.items():
            _check_name(f"factor {self.name!r}: level name", level)
            levels[level] = check_overrides_dict(f"factor {self.name!r} level {level!r}", overrides)
        object.__setattr__(self, "levels", levels)
        reference = self.reference or next(iter(levels))
        if reference not in levels:
            raise ValueError(
                f"factor {self.name!r}: reference = {reference!r} must be one of its levels "
                f"{list(levels)}"
            )
        object.__setattr__(self, "reference", reference)
        if not isinstance(self.reference_in_name, bool):
            raise ValueError(f"factor {self.name!r}: reference_in_name must be a bool")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "levels": {
                level: {k: list(v) if isinstance(v, tuple) else v for k, v in o.items()}
                for level, o in self.levels.items()
            },
            "reference": self.reference,
            "reference_in_name": self.reference_in_name,
        }


@dataclasses.dataclass(frozen=True)
class SplitFactor:
    """A factor of evaluation, not of training: its levels are splits of the same runs.

    Attributes:
      name: e.g. "length".
      levels: level name -> split name, e.g. {"trained": "test", "longer": "test_long"}.
      reference: the level compared with (default: the first).

    A metric "split/key" of the sweep is analysed across this factor when "<s>/key" is a metric
    of the sweep for the split s of every level; other metrics are analysed without it.
    """

    name: str
    levels: Mapping[str, str]
    reference: str = ""

    def __post_init__(self):
        _check_name("factor name", self.name)
        if not isinstance(self.levels, Mapping) or len(self.levels) < 2:
            raise ValueError(
                f"split factor {self.name!r}: levels = {self.levels!r} must be a dict of at "
                "least two level name -> split name"
            )
        for level, split in self.levels.items():
            _check_name(f"split factor {self.name!r}: level name", level)
            if not isinstance(split, str) or not split or "/" in split:
                raise ValueError(
                    f"split factor {self.name!r} level {level!r}: split {split!r} must be a "
                    "split name such as 'test_long'"
                )
        if len(set(self.levels.values())) != len(self.levels):
            raise ValueError(f"split factor {self.name!r}: two levels name the same split")
        object.__setattr__(self, "levels", dict(self.levels))
        reference = self.reference or next(iter(self.levels))
        if reference not in self.levels:
            raise ValueError(
                f"split factor {self.name!r}: reference = {reference!r} must be one of its "
                f"levels {list(self.levels)}"
            )
        object.__setattr__(self, "reference", reference)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "splits": dict(self.levels), "reference": self.reference}


AnyFactor = Factor | SplitFactor


def factor_from_dict(d: Mapping[str, Any]) -> AnyFactor:
    """Inverse of Factor.to_dict / SplitFactor.to_dict (sweep.json)."""
    if "splits" in d:
        return SplitFactor(d["name"], d["splits"], d.get("reference", ""))
    return Factor(d["name"], d["levels"], d.get("reference", ""), d.get("reference_in_name", True))


def check_factors(factors: Sequence[Any]) -> tuple[tuple[Factor, ...], SplitFactor | None]:
    """(trained factors, the split factor or None); unique names, at most one split factor."""
    trained, split = [], []
    for f in factors:
        if isinstance(f, Factor):
            trained.append(f)
        elif isinstance(f, SplitFactor):
            split.append(f)
        else:
            raise ValueError(
                f"factors contains {f!r}: each must be a transformer_jax.sweep.Factor or "
                "SplitFactor"
            )
    names = [f.name for f in factors]
    if len(set(names)) != len(names):
        raise ValueError(f"factor names {names}: contain duplicates")
    if len(split) > 1:
        raise ValueError(f"factors {[f.name for f in split]}: at most one SplitFactor")
    if factors and not trained:
        raise ValueError("factors: at least one Factor (a trained factor) is needed")
    return tuple(trained), (split[0] if split else None)


def normalize_cells(factors: Sequence[Factor], cells: Any) -> tuple[Cell, ...]:
    """The listed cells as level-name tuples in factor order; None means the full grid.

    A cell is a tuple of level names (one per factor, in order) or a dict factor -> level whose
    missing factors are at their reference level ({} is the all-reference cell).
    """
    if cells is None:
        return tuple(itertools.product(*(tuple(f.levels) for f in factors)))
    if isinstance(cells, Mapping | str) or not isinstance(cells, Sequence) or not cells:
        raise ValueError(
            f"cells = {cells!r}: must be None (the full grid) or a non-empty list of cells, "
            "each a dict factor -> level or a tuple of one level per factor"
        )
    by_name = {f.name: f for f in factors}
    out = []
    for cell in cells:
        if isinstance(cell, Mapping):
            unknown = sorted(set(cell) - set(by_name))
            if unknown:
                raise ValueError(
                    f"cell {dict(cell)!r}: {unknown} are not factors; factors: {list(by_name)}"
                )
            levels = tuple(cell.get(f.name, f.reference) for f in factors)
        elif isinstance(cell, list | tuple):
            if len(cell) != len(factors):
                raise ValueError(
                    f"cell {tuple(cell)!r}: needs one level for each factor "
                    f"{[f.name for f in factors]}"
                )
            levels = tuple(cell)
        else:
            raise ValueError(f"cell {cell!r}: must be a dict factor -> level or a tuple of levels")
        for f, level in zip(factors, levels, strict=True):
            if level not in f.levels:
                raise ValueError(
                    f"cell {levels!r}: {level!r} is not a level of factor {f.name!r} "
                    f"(levels: {list(f.levels)})"
                )
        if levels in out:
            raise ValueError(f"cell {levels!r} is listed twice")
        out.append(levels)
    return tuple(out)


def cell_name(factors: Sequence[Factor], cell: Cell) -> str:
    """The variant name of a cell: its level names joined by '_' (see Factor.reference_in_name)."""
    parts = [
        level
        for f, level in zip(factors, cell, strict=True)
        if f.reference_in_name or level != f.reference
    ]
    if not parts:
        raise ValueError(
            f"cell {cell!r} has an empty name: every factor leaves its reference level out of "
            "names; set reference_in_name=True on one of them"
        )
    return "_".join(parts)


def cell_overrides(factors: Sequence[Factor], cell: Cell) -> dict[str, Any]:
    """The union of the cell's level overrides; one key set differently by two factors is an
    error naming both."""
    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    for f, level in zip(factors, cell, strict=True):
        for key, value in f.levels[level].items():
            if key in merged and merged[key] != value:
                raise ValueError(
                    f"cell {cell!r}: factor {source[key]} sets {key}={merged[key]!r} but factor "
                    f"{f.name!r} (level {level!r}) sets {key}={value!r}; factors must set "
                    "different config fields"
                )
            merged[key] = value
            source.setdefault(key, f"{f.name!r} (level {level!r})")
    return merged


def expand(factors: Sequence[Factor], cells: Sequence[Cell]) -> dict[str, tuple[Cell, dict]]:
    """variant name -> (cell, overrides), in cell order; names must be unique."""
    out: dict[str, tuple[Cell, dict]] = {}
    for cell in cells:
        name = cell_name(factors, cell)
        if name in out:
            raise ValueError(
                f"cells {out[name][0]!r} and {cell!r} both get the variant name {name!r}; "
                "rename a level or set reference_in_name=True"
            )
        out[name] = (cell, cell_overrides(factors, cell))
    return out
