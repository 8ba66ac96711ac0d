"""Nuisance hyperparameters: trained for every cell, chosen on validation, never compared.

A claim like "post-norm needs warmup" is about the architecture, not about the one learning
rate every variant happened to share. Following the Deep Learning Tuning Playbook (Godbole et
al. 2023), a sweep can declare the learning rate (and warmup, ...) as *nuisance* factors:

    Sweep(..., nuisance={"train.learning_rate": (5e-4, 1e-3, 2e-3, 5e-3)},
          select_on="validation/loss", select_mode="min")

Every cell (variant) is then trained at every setting of the nuisance grid (the product of the
listed values), and the report compares cells each at its own best setting, chosen by the
validation metric `select_on` (report/tuning.py). A setting's runs live in
WORKDIR/<variant>/<setting>/seed_<seed>/, the setting named by its values
("learning_rate-0.002_warmup_steps-50"); a sweep without nuisance keeps WORKDIR/<variant>/seed_<s>.

Inside the runner and the report a (variant, setting) pair is a *run variant* named
"<variant>/<setting>": it has its own overrides (the variant's plus the setting's), its own seed
group and its own rows in runs.csv.

With `confirm_seeds`, the setting each variant chooses is trained again on those fresh seeds as
the run variant "<variant>/confirm/<setting>" (WORKDIR/<variant>/confirm/<setting>/seed_<s>/),
and the report takes every test figure from these confirmation runs (sweep/selection.py).
"""

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from transformer_jax.sweep import factors as factors_lib

SelectMode = Literal["max", "min"]
SelectPer = Literal["cell", "seed"]
SELECT_MODES = ("max", "min")
SELECT_PER = ("cell", "seed")
# The directory of a variant's confirmation runs; no setting is named so (a setting's name
# always holds a "-": "learning_rate-0.002").
CONFIRM = "confirm"


def check_grid(nuisance: Any) -> dict[str, tuple[Any, ...]]:
    """The nuisance grid as key -> tuple of values; at least two distinct values per key."""
    if not isinstance(nuisance, Mapping):
        raise ValueError(
            f"nuisance = {nuisance!r}: must be a dict of dotted config key -> list of values, "
            "e.g. {'train.learning_rate': [5e-4, 1e-3, 2e-3, 5e-3]}"
        )
    grid = {}
    for key, values in factors_lib.check_overrides_dict("nuisance", nuisance).items():
        if not isinstance(values, tuple) or len(values) < 2:
            raise ValueError(
                f"nuisance[{key!r}] = {values!r}: must list at least two values to choose from"
            )
        if len(set(values)) != len(values):
            raise ValueError(f"nuisance[{key!r}] = {values!r}: contains duplicates")
        grid[key] = values
    leaves = [key.rpartition(".")[2] for key in grid]
    if len(set(leaves)) != len(leaves):
        raise ValueError(
            f"nuisance keys {list(grid)}: their last components {leaves} name the settings' "
            "directories and must differ"
        )
    return grid


def setting_name(setting: Mapping[str, Any]) -> str:
    """Directory name of one setting: "learning_rate-0.002_warmup_steps-50"."""
    return "_".join(f"{k.rpartition('.')[2]}-{_text(v)}" for k, v in setting.items())


def _text(value: Any) -> str:
    # repr keeps floats exact (1e-05, 0.002; 1e+30 written 1e30, as "+" is no name character,
    # and read back as the same float); other scalars as the config flag would spell them.
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value).replace("e+", "e") if isinstance(value, float) else str(value)


def settings(grid: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, Any]]:
    """Setting name -> overrides, every combination of the grid, the first key varying slowest."""
    out = {}
    if not grid:
        return out
    for values in itertools.product(*grid.values()):
        setting = dict(zip(grid, values, strict=True))
        name = setting_name(setting)
        if not factors_lib.NAME.fullmatch(name):
            raise ValueError(
                f"nuisance setting {setting!r}: its directory name {name!r} must match "
                f"{factors_lib.NAME.pattern}; use numbers or plain words as values"
            )
        out[name] = setting
    return out


def run_variant(variant: str, setting: str) -> str:
    """The name of one (variant, setting) pair inside the runner and the report."""
    return f"{variant}/{setting}"


def split_run_variant(name: str) -> tuple[str, str]:
    """Inverse of run_variant (and confirm_run_variant): (variant, setting); setting is "" for a
    sweep without nuisance."""
    variant, _, setting = name.partition("/")
    return variant, setting.removeprefix(f"{CONFIRM}/")


def confirm_run_variant(variant: str, setting: str) -> str:
    """The confirmation runs of a variant at a setting, "<variant>/confirm/<setting>": their
    directory WORKDIR/<variant>/confirm/<setting>/ records the setting they trained at."""
    return f"{variant}/{CONFIRM}/{setting}"


def is_confirm(name: str) -> bool:
    """Whether a run variant is a confirmation one (confirm_run_variant)."""
    return name.partition("/")[2].startswith(f"{CONFIRM}/")


def on_edge(grid: Mapping[str, Sequence[Any]], setting: Mapping[str, Any]) -> list[str]:
    """The keys whose chosen value is the smallest or largest of its grid (the grid may be too
    narrow: the best value may lie beyond it). Non-numeric values count as never on an edge, and
    so does a lower edge of 0 (no warmup, no dropout): nothing lies below it."""
    out = []
    for key, value in setting.items():
        values = grid[key]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            continue
        if value == max(values) or (value == min(values) and value != 0):
            out.append(key)
    return out


@dataclasses.dataclass(frozen=True)
class GridExtension:
    """The boundary check of a nuisance grid (sweep/grid_edges.py), declared in the sweep file.

    max_rounds: how many times a cell's grid may be extended outward (each round adds one value
      beyond every edge that needs it).
    margin: in select_on units: an edge is extended when its inner neighbour is worse by more
      than this and than the seed spread (the larger of the two settings' sample sds).
    keys: the nuisance keys checked (numeric ones); () means every numeric key of the grid.
    refine: after the last extension, one round at half the ratio: a value between the best
      and each of its neighbours (the geometric mean where both are > 0, else the midpoint).
    """

    max_rounds: int = 2
    margin: float = 0.0
    keys: tuple[str, ...] = ()
    refine: bool = False

    def checked(self, grid: Mapping[str, Sequence[Any]]) -> "GridExtension":
        """This declaration with keys filled in, validated against the nuisance grid."""
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int):
            raise ValueError(f"grid_extension.max_rounds = {self.max_rounds!r}: must be an int")
        if self.max_rounds < 0:
            raise ValueError(f"grid_extension.max_rounds = {self.max_rounds}: must be >= 0")
        number = isinstance(self.margin, int | float) and not isinstance(self.margin, bool)
        if not number or not self.margin >= 0:
            raise ValueError(f"grid_extension.margin = {self.margin!r}: must be a number >= 0")
        numeric = [k for k, vs in grid.items() if all(_is_number(v) for v in vs)]
        keys = tuple(self.keys) or tuple(numeric)
        for key in keys:
            if key not in numeric:
                raise ValueError(
                    f"grid_extension.keys contains {key!r}: valid are the numeric nuisance keys "
                    f"{numeric}"
                )
        if not isinstance(self.refine, bool):
            raise ValueError(f"grid_extension.refine = {self.refine!r}: must be a bool")
        return dataclasses.replace(self, keys=keys, margin=float(self.margin))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "keys": list(self.keys)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GridExtension":
        return cls(d["max_rounds"], d["margin"], tuple(d["keys"]), d["refine"])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
