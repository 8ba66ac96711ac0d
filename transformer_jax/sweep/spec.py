"""The sweep spec: one ablation stated in a few lines, validated before anything runs.

Holds the Sweep dataclass, load_sweep (a sweep file -> Sweep), format_override (an override as
config flag text) and check_overrides (every override against the base config).

A sweep file is a Python file (usually in experiments/) whose module docstring states the claim
tested and which defines `get_sweep() -> Sweep`:

    '''Scaling attention logits by 1/sqrt(d_k) is needed to learn copy at d_model=256.'''
    from transformer_jax.sweep import Sweep

    def get_sweep():
        return Sweep(
            config="configs/algorithmic.py",
            variants={"scaled": {}, "unscaled": {"model.attention.scale": "none"}},
            seeds=(0, 1, 2),
            metrics=("test/seq_accuracy", "test_long/token_accuracy"),
            baseline="scaled",
        )

Each (variant, seed) becomes one `python -m transformer_jax.main` run with the variant's overrides
passed as ml_collections config flags (`--config.model.attention.scale=none`).
"""

import dataclasses
import importlib.machinery
import importlib.util
import math
import os
import re
from collections.abc import Mapping
from typing import Any

from ml_collections.config_flags import config_path

from transformer_jax import fields as F
from transformer_jax.sweep import factors as factors_lib
from transformer_jax.sweep import nuisance as nuisance_lib
from transformer_jax.sweep import sequential
from transformer_jax.sweep.factors import AnyFactor, Cell, Factor, SplitFactor
from transformer_jax.sweep.nuisance import GridExtension

OverrideValue = bool | int | float | str | tuple
# Variant names become directory names; keep them portable and free of path separators.
_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclasses.dataclass(frozen=True)
class Sweep:
    """One ablation: variants of a base config, each trained with every seed.

    Attributes:
      config: path of the base config file (ml_collections, `get_config(arg)`), relative to the
        directory the sweep is launched from, e.g. "configs/algorithmic.py".
      variants: variant name -> config overrides in dotted form, e.g.
        {"no_scale": {"model.attention.scale": "none"}}; {} is the unchanged base config. With
        factors, these are variants beside the grid (may be empty); after construction this
        holds every variant, the cells first.
      seeds: seeds every variant is trained with (passed as --config.seed).
      metrics: final metrics reported, "split/metric" meaning summary.json
        metrics[split][metric], e.g. "test/seq_accuracy"; the first is the main one (bar chart).
      baseline: the variant others are compared against (paired by seed). With factors it
        defaults to the cell at every factor's reference level.
      description: the claim tested; load_sweep fills it from the module docstring when empty.
      config_arg: argument passed to get_config (`--config=configs/algorithmic.py:<config_arg>`).
      factors: Factor (trained) and at most one SplitFactor (evaluated), see sweep/factors.py;
        each cell of the trained factors becomes a variant named by its levels.
      cells: the cells trained, each a dict factor -> level (others at their reference) or a
        tuple of one level per trained factor; None is the full grid. Normalized to tuples.
      nuisance: dotted config key -> values, e.g. {"train.learning_rate": (1e-3, 2e-3, 4e-3)}:
        every variant is trained at every combination (sweep/nuisance.py) and compared at the
        one chosen on `select_on`; the report also shows the shared default untuned.
      select_on: the validation metric that chooses a nuisance setting, "split/metric" of a
        split that is not a test split, e.g. "validation/loss".
      select_mode: "max" or "min": whether a larger or smaller select_on is better.
      select_per: "cell" (one setting per variant: the best mean over seeds) or "seed" (each
        seed its own best setting).
      nuisance_default: key -> the base config's value, which must be one of the grid's; filled
        in from the config when the sweep is launched (sweep.json keeps it).
      equivalence_margins: reported metric -> the margin (> 0) within which a difference does not
        matter, e.g. {"test/loss": 0.02}: the report then gives each comparison of that metric
        a verdict, different, equivalent or inconclusive (report/equivalence.py).
      confirm_seeds: with nuisance, fresh seeds (none of `seeds`) on which each variant's chosen
        setting is trained again once its selection is complete; every test figure the report
        gives then comes from these confirmation runs, the runs of `seeds` only choose
        (docs/tuning.md). Needs select_per="cell" (one setting per variant).
      confirm_rounds: with confirm_seeds, confirmation in rounds (sweep/sequential.py):
        cumulative seed counts, e.g. (4, 8, 12, 16, 20), the last len(confirm_seeds); after each
        round every comparison is judged on each metric with an equivalence margin (one is
        needed) at the bounds of an alpha-spending design, and only the cells with a comparison
        still undecided train the next round.
      spending: the alpha-spending function of confirm_rounds, "obrien_fleming" or "pocock".
      grid_extension: with nuisance, the boundary check (sweep/grid_edges.py): a cell whose best
        setting lies on an edge of a grid axis, its inner neighbour clearly worse, gets that
        axis extended outward on the selection seeds, up to a declared number of rounds.
      extra_settings: variant -> the settings the grid extension added to it (each a dict of
        every nuisance key -> value); set from the sweep directory's record
        (grid_edges.applied), never by a sweep file.
    """

    config: str
    variants: Mapping[str, Mapping[str, OverrideValue]] = dataclasses.field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    metrics: tuple[str, ...] = ()
    baseline: str = ""
    description: str = ""
    config_arg: str = ""
    factors: tuple[AnyFactor, ...] = ()
    cells: tuple[Cell, ...] | None = None
    nuisance: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    select_on: str = ""
    select_mode: str = ""
    select_per: str = "cell"
    nuisance_default: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    equivalence_margins: Mapping[str, float] = dataclasses.field(default_factory=dict)
    confirm_seeds: tuple[int, ...] = ()
    confirm_rounds: tuple[int, ...] = ()
    spending: str = sequential.OBRIEN_FLEMING
    grid_extension: GridExtension | None = None
    extra_settings: Mapping[str, tuple[Mapping[str, Any], ...]] = dataclasses.field(
        default_factory=dict
    )

    def __post_init__(self):
        if isinstance(self.config, str) and ":" in self.config:
            raise ValueError(
                f"config = {self.config!r}: put the get_config argument in config_arg, "
                "not after a colon"
            )
        if not isinstance(self.config, str) or not self.config.endswith(".py"):
            raise ValueError(f"config = {self.config!r}: must be the path of a .py config file")
        if not isinstance(self.config_arg, str):
            raise ValueError(f"config_arg = {self.config_arg!r}: must be a str")
        if not isinstance(self.description, str):
            raise ValueError(f"description = {self.description!r}: must be a str")

        if not isinstance(self.factors, list | tuple):
            raise ValueError(f"factors = {self.factors!r}: must be a tuple of Factor")
        trained, split = factors_lib.check_factors(tuple(self.factors))
        object.__setattr__(self, "factors", tuple(self.factors))
        variants: dict[str, dict[str, OverrideValue]] = {}
        cell_of: dict[str, Cell] = {}
        if trained:
            cells = factors_lib.normalize_cells(trained, self.cells)
            for name, (cell, overrides) in factors_lib.expand(trained, cells).items():
                if not _VARIANT_NAME.fullmatch(name):
                    raise ValueError(f"cell {cell!r}: variant name {name!r} is not valid")
                variants[name], cell_of[name] = overrides, cell
        elif self.cells is not None:
            raise ValueError(f"cells = {self.cells!r}: cells need factors")
        else:
            cells = None
        object.__setattr__(self, "cells", cells)

        if not isinstance(self.variants, Mapping) or not (self.variants or trained):
            raise ValueError(
                f"variants = {self.variants!r}: must be a non-empty dict of "
                "name -> {dotted.key: value}"
            )
        for name, overrides in self.variants.items():
            if not isinstance(name, str) or not _VARIANT_NAME.fullmatch(name):
                raise ValueError(
                    f"variant name {name!r}: must match {_VARIANT_NAME.pattern} "
                    "(it names the run directory)"
                )
            checked = factors_lib.check_overrides_dict(f"variants[{name!r}]", overrides)
            if name in cell_of:
                # A Sweep rebuilt from to_dict lists its cells among the variants too.
                if checked != variants[name]:
                    raise ValueError(
                        f"variants[{name!r}] = {checked!r}: a cell of the factors has this name "
                        f"with overrides {variants[name]!r}; rename the variant"
                    )
                continue
            variants[name] = checked
        object.__setattr__(self, "variants", variants)
        object.__setattr__(self, "_cell_of", cell_of)
        object.__setattr__(self, "_trained", trained)
        object.__setattr__(self, "_split", split)

        seeds = tuple(self.seeds) if isinstance(self.seeds, list | tuple) else None
        if not seeds:
            raise ValueError(f"seeds = {self.seeds!r}: must be a non-empty tuple of ints")
        object.__setattr__(self, "seeds", _check_seeds("seeds", seeds))

        metrics = tuple(self.metrics) if isinstance(self.metrics, list | tuple) else None
        if not metrics:
            raise ValueError(
                f"metrics = {self.metrics!r}: must be a non-empty tuple like ('test/seq_accuracy',)"
            )
        for metric in metrics:
            split_name, _, key = metric.partition("/") if isinstance(metric, str) else ("", "", "")
            if not split_name or not key:
                raise ValueError(
                    f"metrics contains {metric!r}: must be 'split/metric' (summary.json "
                    "metrics[split][metric]), e.g. 'test/seq_accuracy'"
                )
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"metrics = {metrics!r}: contains duplicates")
        object.__setattr__(self, "metrics", metrics)
        if split is not None and not self.split_metrics():
            raise ValueError(
                f"split factor {split.name!r}: no metric is listed for every one of its splits "
                f"{list(split.levels.values())} (e.g. "
                f"{', '.join(f'{s}/seq_accuracy' for s in split.levels.values())})"
            )

        baseline = self.baseline
        if not baseline and trained:
            reference = tuple(f.reference for f in trained)
            names = [n for n, c in cell_of.items() if c == reference]
            if not names:
                raise ValueError(
                    f"baseline: the reference cell {reference!r} is not among the cells; list "
                    "it in cells or name a baseline variant"
                )
            baseline = names[0]
        if baseline not in variants:
            raise ValueError(
                f"baseline = {self.baseline!r}: must be one of the variants {sorted(variants)}"
            )
        object.__setattr__(self, "baseline", baseline)
        self._check_nuisance()
        object.__setattr__(
            self, "equivalence_margins", check_margins(self.equivalence_margins, metrics)
        )
        self._check_confirm_seeds()
        self._check_rounds()

    def _check_rounds(self) -> None:
        if self.spending not in sequential.SPENDING:
            raise ValueError(
                f"spending = {self.spending!r}: must be one of {list(sequential.SPENDING)}"
            )
        if not self.confirm_rounds:
            object.__setattr__(self, "confirm_rounds", ())
            return
        rounds = sequential.check_rounds(self.confirm_rounds)
        object.__setattr__(self, "confirm_rounds", rounds)
        if rounds[-1] != len(self.confirm_seeds):
            raise ValueError(
                f"confirm_rounds = {rounds!r}: the last round must train every one of the "
                f"{len(self.confirm_seeds)} confirm_seeds"
            )
        if not self.equivalence_margins:
            raise ValueError(
                f"confirm_rounds = {rounds!r}: needs equivalence_margins (a comparison stops "
                "once different or equivalent within its metric's margin)"
            )

    def _check_confirm_seeds(self) -> None:
        if not isinstance(self.confirm_seeds, list | tuple):
            raise ValueError(
                f"confirm_seeds = {self.confirm_seeds!r}: must be a tuple of ints, e.g. "
                "(10, 11, 12)"
            )
        confirm = _check_seeds("confirm_seeds", tuple(self.confirm_seeds))
        object.__setattr__(self, "confirm_seeds", confirm)
        if not confirm:
            return
        if not self.nuisance:
            raise ValueError(
                f"confirm_seeds = {confirm!r}: needs nuisance (they retrain each variant's "
                "chosen setting; without nuisance nothing is chosen)"
            )
        if self.select_per != "cell":
            raise ValueError(
                f"confirm_seeds = {confirm!r}: needs select_per='cell' (one chosen setting per "
                f"variant to retrain), not {self.select_per!r}"
            )
        shared = sorted(set(confirm) & set(self.seeds))
        if shared:
            raise ValueError(
                f"confirm_seeds = {confirm!r}: {shared} are also among seeds {self.seeds}; "
                "confirmation seeds must be fresh"
            )

    def _check_nuisance(self) -> None:
        grid = nuisance_lib.check_grid(self.nuisance)
        object.__setattr__(self, "nuisance", grid)
        object.__setattr__(self, "_settings", nuisance_lib.settings(grid))
        self._check_extension(grid)
        if not grid:
            for field in ("select_on", "select_mode", "nuisance_default"):
                if getattr(self, field):
                    raise ValueError(f"{field} = {getattr(self, field)!r}: needs nuisance")
            return
        split, _, key = self.select_on.partition("/") if isinstance(self.select_on, str) else "//"
        if not split or not key:
            raise ValueError(
                f"select_on = {self.select_on!r}: nuisance needs the validation metric that "
                "chooses a setting, 'split/metric', e.g. 'validation/loss'"
            )
        if split.startswith("test"):
            raise ValueError(
                f"select_on = {self.select_on!r}: {split!r} is a test split; the setting must "
                "be chosen on a validation split (e.g. 'validation/loss') so that the test "
                "metrics stay unseen"
            )
        if self.select_mode not in nuisance_lib.SELECT_MODES:
            raise ValueError(
                f"select_mode = {self.select_mode!r}: must be 'max' (larger {self.select_on} "
                f"is better) or 'min'"
            )
        if self.select_per not in nuisance_lib.SELECT_PER:
            raise ValueError(
                f"select_per = {self.select_per!r}: must be 'cell' (one setting per variant, "
                "best mean over seeds) or 'seed' (each seed its own)"
            )
        for name, overrides in self.variants.items():
            clash = sorted(set(overrides) & set(grid))
            if clash:
                raise ValueError(
                    f"variants[{name!r}] sets {clash}, which nuisance tunes; a key is either "
                    "scientific (a variant or factor level) or nuisance, not both"
                )
        default = dict(self.nuisance_default)
        if default:
            if set(default) != set(grid):
                raise ValueError(
                    f"nuisance_default = {default!r}: must give a value for each of {list(grid)}"
                )
            for key, value in default.items():
                if value not in grid[key]:
                    raise ValueError(
                        f"nuisance[{key!r}] = {list(grid[key])} lacks the base config's value "
                        f"{value!r}; add it so that the report can show the untuned comparison"
                    )
        object.__setattr__(self, "nuisance_default", {k: default[k] for k in grid if default})

    def _check_extension(self, grid) -> None:
        if self.grid_extension is not None:
            if not grid:
                raise ValueError(f"grid_extension = {self.grid_extension!r}: needs nuisance")
            if not isinstance(self.grid_extension, GridExtension):
                raise ValueError(
                    f"grid_extension = {self.grid_extension!r}: must be a "
                    "transformer_jax.sweep.GridExtension"
                )
            object.__setattr__(self, "grid_extension", self.grid_extension.checked(grid))
        extra: dict[str, dict[str, dict[str, Any]]] = {}
        for variant, added in dict(self.extra_settings).items():
            if variant not in self.variants or self.grid_extension is None:
                raise ValueError(
                    f"extra_settings[{variant!r}]: needs grid_extension and a variant of "
                    f"{sorted(self.variants)}"
                )
            for setting in added:
                if set(setting) != set(grid):
                    raise ValueError(
                        f"extra_settings[{variant!r}] holds {dict(setting)!r}: must give a "
                        f"value for each of {list(grid)}"
                    )
                values = {k: setting[k] for k in grid}
                extra.setdefault(variant, {})[nuisance_lib.setting_name(values)] = values
        object.__setattr__(self, "_extra", extra)
        union = dict(self._settings)
        for added in extra.values():
            union.update(added)
        object.__setattr__(self, "_all_settings", union)

    @property
    def settings(self) -> dict[str, dict[str, Any]]:
        """Nuisance setting name -> overrides, every combination of the grid and every
        setting the grid extension added to some variant; {} without nuisance."""
        return self._all_settings

    @property
    def grid_settings(self) -> dict[str, dict[str, Any]]:
        """The declared grid's settings alone (every variant trains each)."""
        return self._settings

    def settings_of(self, variant: str) -> dict[str, dict[str, Any]]:
        """The settings one variant trains at: the grid's, then those its extension added."""
        return {**self._settings, **self._extra.get(variant, {})}

    @property
    def default_setting(self) -> str:
        """The setting at the base config's values ("" until the sweep is launched)."""
        if not self.nuisance_default:
            return ""
        return nuisance_lib.setting_name(self.nuisance_default)

    @property
    def run_variants(self) -> dict[str, dict[str, Any]]:
        """What is trained: run variant name -> overrides. Without nuisance, the variants; with
        it, "<variant>/<setting>" for every variant and setting, its overrides both's."""
        if not self.nuisance:
            return dict(self.variants)
        return {
            nuisance_lib.run_variant(name, setting): {**overrides, **values}
            for name, overrides in self.variants.items()
            for setting, values in self.settings_of(name).items()
        }

    @property
    def confirm_run_variants(self) -> dict[str, dict[str, Any]]:
        """The confirmation runs a selection may ask for: "<variant>/confirm/<setting>" -> its
        overrides, for every variant and setting (only the chosen ones are trained, on
        confirm_seeds); {} without confirm_seeds."""
        if not self.confirm_seeds:
            return {}
        return {
            nuisance_lib.confirm_run_variant(name, setting): {**overrides, **values}
            for name, overrides in self.variants.items()
            for setting, values in self.settings_of(name).items()
        }

    def overrides_of(self, run_variant: str) -> dict[str, Any]:
        """The overrides of a selection run variant (run_variants) or a confirmation one."""
        if run_variant in self.run_variants:
            return self.run_variants[run_variant]
        return self.confirm_run_variants[run_variant]

    @property
    def recorded_metrics(self) -> tuple[str, ...]:
        """The metrics runs.csv keeps: the reported ones and the selection metric."""
        if self.select_on and self.select_on not in self.metrics:
            return (*self.metrics, self.select_on)
        return self.metrics

    def tuned(
        self,
        nuisance: Mapping[str, Any],
        select_on: str,
        select_mode: str,
        select_per: str = "cell",
        drop_factors: tuple[str, ...] = (),
        description: str = "",
        confirm_seeds: tuple[int, ...] = (),
        confirm_rounds: tuple[int, ...] = (),
        grid_extension: GridExtension | None = None,
    ) -> "Sweep":
        """This sweep with nuisance factors (sweep/nuisance.py): the tuned version of a shipped
        sweep. drop_factors names trained factors whose config keys become nuisance (e.g. a
        warmup factor when warmup is tuned): they leave the factors and the cells, and the
        cells that then coincide are trained once. description "" takes the sweep file's
        docstring; confirm_seeds retrain each chosen setting on fresh seeds, in confirm_rounds
        if given (sequential confirmation, at this sweep's spending); grid_extension extends the
        new nuisance grid at its edges."""
        unknown = sorted(set(drop_factors) - {f.name for f in self._trained})
        if unknown:
            raise ValueError(
                f"drop_factors = {list(drop_factors)}: {unknown} are not trained factors of "
                f"this sweep ({[f.name for f in self._trained]})"
            )
        keep = [i for i, f in enumerate(self.factors) if f.name not in drop_factors]
        trained_keep = [i for i, f in enumerate(self._trained) if f.name not in drop_factors]
        cells = None
        if self.cells is not None:
            cells = list(dict.fromkeys(tuple(c[i] for i in trained_keep) for c in self.cells))
        return Sweep(
            config=self.config,
            config_arg=self.config_arg,
            variants={n: o for n, o in self.variants.items() if n not in self._cell_of},
            seeds=self.seeds,
            metrics=self.metrics,
            baseline="" if self.baseline in self._cell_of else self.baseline,
            description=description,
            factors=tuple(self.factors[i] for i in keep),
            cells=cells,
            nuisance=nuisance,
            select_on=select_on,
            select_mode=select_mode,
            select_per=select_per,
            equivalence_margins=self.equivalence_margins,
            confirm_seeds=confirm_seeds,
            confirm_rounds=confirm_rounds,
            spending=self.spending,
            grid_extension=grid_extension,
        )

    @property
    def trained_factors(self) -> tuple[Factor, ...]:
        """The factors whose levels are trained (the cells' factors), in order."""
        return self._trained

    @property
    def split_factor(self) -> SplitFactor | None:
        return self._split

    @property
    def is_factorial(self) -> bool:
        return bool(self._trained)

    def cell_of(self, variant: str) -> Cell | None:
        """The cell (one level per trained factor) a variant is, or None for a flat variant."""
        return self._cell_of.get(variant)

    def split_metrics(self) -> dict[str, dict[str, str]]:
        """Metric key -> {split factor level -> "split/key"} for every key listed in metrics for
        all the split factor's splits (empty without a split factor)."""
        split = self._split
        if split is None:
            return {}
        out = {}
        for metric in self.metrics:
            _, _, key = metric.partition("/")
            by_level = {level: f"{s}/{key}" for level, s in split.levels.items()}
            if key not in out and all(m in self.metrics for m in by_level.values()):
                out[key] = by_level
        return out

    @property
    def config_spec(self) -> str:
        """The --config flag value: path, plus ':arg' when config_arg is set."""
        return f"{self.config}:{self.config_arg}" if self.config_arg else self.config

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (tuples become lists); inverse of from_dict."""
        d = {
            "config": self.config,
            "config_arg": self.config_arg,
            "variants": {
                n: {k: _jsonable(v) for k, v in o.items()} for n, o in self.variants.items()
            },
            "seeds": list(self.seeds),
            "metrics": list(self.metrics),
            "baseline": self.baseline,
            "description": self.description,
        }
        if self.factors:
            d["factors"] = [f.to_dict() for f in self.factors]
            d["cells"] = [list(c) for c in self.cells]
        if self.nuisance:
            d["nuisance"] = {k: [_jsonable(v) for v in vs] for k, vs in self.nuisance.items()}
            d["nuisance_default"] = {k: _jsonable(v) for k, v in self.nuisance_default.items()}
            d.update(select_on=self.select_on, select_mode=self.select_mode)
            d["select_per"] = self.select_per
        if self.equivalence_margins:
            d["equivalence_margins"] = dict(self.equivalence_margins)
        if self.confirm_seeds:
            d["confirm_seeds"] = list(self.confirm_seeds)
        if self.confirm_rounds:
            d.update(confirm_rounds=list(self.confirm_rounds), spending=self.spending)
        if self.grid_extension is not None:
            d["grid_extension"] = self.grid_extension.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Sweep":
        """Rebuilds (and revalidates) a Sweep from to_dict's output, e.g. read from sweep.json."""
        factors = tuple(factors_lib.factor_from_dict(f) for f in d.get("factors", ()))
        return cls(
            config=d["config"],
            config_arg=d.get("config_arg", ""),
            variants=d["variants"],
            seeds=tuple(d["seeds"]),
            metrics=tuple(d["metrics"]),
            baseline=d["baseline"],
            description=d.get("description", ""),
            factors=factors,
            cells=[tuple(c) for c in d["cells"]] if factors else None,
            nuisance=d.get("nuisance", {}),
            select_on=d.get("select_on", ""),
            select_mode=d.get("select_mode", ""),
            select_per=d.get("select_per", "cell"),
            nuisance_default=d.get("nuisance_default", {}),
            equivalence_margins=d.get("equivalence_margins", {}),
            confirm_seeds=tuple(d.get("confirm_seeds", ())),
            confirm_rounds=tuple(d.get("confirm_rounds", ())),
            spending=d.get("spending", sequential.OBRIEN_FLEMING),
            grid_extension=(
                GridExtension.from_dict(d["grid_extension"]) if "grid_extension" in d else None
            ),
        )


def check_margins(margins, metrics: tuple[str, ...]) -> dict[str, float]:
    """`Sweep.equivalence_margins` checked: each key a reported metric, each margin a number > 0."""
    if not isinstance(margins, Mapping):
        raise ValueError(
            f"equivalence_margins = {margins!r}: must be a dict of reported metric -> margin, "
            "e.g. {'test/loss': 0.02}"
        )
    for metric, margin in margins.items():
        if metric not in metrics:
            raise ValueError(
                f"equivalence_margins[{metric!r}]: not a reported metric; valid: {list(metrics)}"
            )
        number = isinstance(margin, int | float) and not isinstance(margin, bool)
        if not number or not math.isfinite(margin) or margin <= 0:
            raise ValueError(
                f"equivalence_margins[{metric!r}] = {margin!r}: must be a number > 0, the "
                "difference that does not matter"
            )
    return {metric: float(margin) for metric, margin in margins.items()}


def _check_seeds(field: str, seeds: tuple) -> tuple[int, ...]:
    for seed in seeds:
        if not F.is_seed(seed):
            raise ValueError(f"{field} = {seeds!r} holds {seed!r}; valid seeds: {F.VALID_SEEDS}")
    if len(set(seeds)) != len(seeds):
        repeated = ", ".join(str(s) for s in sorted(set(seeds)) if seeds.count(s) > 1)
        raise ValueError(
            f"{field} = {seeds!r}: contains duplicates ({repeated}); valid: each seed once"
        )
    return seeds


def _jsonable(value: OverrideValue) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, tuple) else value


def load_sweep(path: str) -> Sweep:
    """Imports a sweep file by path and returns its validated Sweep, description filled in."""
    if not os.path.isfile(path):
        raise ValueError(f"sweep file {path!r} does not exist")
    name = "_sweep_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    # The loader named: spec_from_file_location finds none for a file not ending in .py.
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    try:
        loader.exec_module(module)
    except SyntaxError as error:  # a README, a YAML file
        raise ValueError(
            f"sweep file {path!r} is not Python ({error.msg}, line {error.lineno}); valid: a "
            ".py file defining get_sweep(), e.g. --sweep=experiments/quickstart.py"
        ) from None
    get_sweep = getattr(module, "get_sweep", None)
    if not callable(get_sweep):
        raise ValueError(
            f"sweep file {path!r} defines no get_sweep(); valid: a .py file defining "
            "get_sweep() returning a Sweep, e.g. --sweep=experiments/quickstart.py (a config "
            "file, defining get_config(), trains with python -m transformer_jax.main --config=FILE)"
        )
    sweep = get_sweep()
    if not isinstance(sweep, Sweep):
        raise ValueError(
            f"get_sweep() in {path!r} returned {type(sweep).__name__}; it must return a "
            "transformer_jax.sweep.Sweep"
        )
    if not sweep.description.strip():
        doc = (module.__doc__ or "").strip()
        if not doc:
            raise ValueError(
                f"description of {path!r} is empty: state the claim tested in the module "
                "docstring or in Sweep(description=...)"
            )
        sweep = dataclasses.replace(sweep, description=doc)
    return sweep


def format_override(value: OverrideValue) -> str:
    """Text of a `--config.<key>=<text>` flag that ml_collections parses back to value.

    Booleans are lower case (absl's BooleanParser), floats use repr (exact round trip), tuples
    use repr (config_flags' TupleParser runs ast.literal_eval).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return repr(value)
    return str(value)


def _load_config(path: str, arg: str) -> Any:
    """Calls get_config the way ml_collections' config_flags does (argument only when given)."""
    spec = importlib.util.spec_from_file_location("_sweep_base_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg) if arg else module.get_config()


def check_overrides(sweep: Sweep, config_arg: str) -> None:
    """Raises ValueError unless every override names an existing config field of a matching type.

    This catches a typo in one variant before any run starts, instead of hours later when that
    variant's runs fail. config_arg is the argument actually passed (it may be "quick").
    """
    if not os.path.isfile(sweep.config):
        raise ValueError(
            f"config = {sweep.config!r} does not exist (relative to {os.getcwd()!r}); "
            "launch the sweep from the repository root"
        )
    config = _load_config(sweep.config, config_arg)
    # With nuisance, every variant at every setting: the grid's values are checked too.
    for name, overrides in sweep.run_variants.items():
        for key, value in overrides.items():
            refusal = _refusal(config, sweep.config, key, value)
            if refusal is not None:
                raise ValueError(f"variants[{name!r}]{refusal}")
        _check_wandb(name, overrides, config)


def _refusal(config, config_name: str, key: str, value: Any) -> str | None:
    """Why `config` refuses the override key=value (the message after the variant's name), or
    None: key is not a field, a field no config flag overrides, or of another type."""
    try:
        field_type = config_path.get_type(key, config)
    except (KeyError, AttributeError, IndexError) as e:
        return f" overrides {key!r}, which is not a field of {config_name} ({e})"
    ok = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
        tuple: lambda v: isinstance(v, tuple),
    }.get(field_type)
    if ok is None:
        return (
            f" overrides {key!r}, whose type in {config_name} is "
            f"{getattr(field_type, '__name__', field_type)}; config flags can only "
            "override bool, int, float, str and tuple fields (use a typed "
            "ml_collections placeholder for fields that default to None)"
        )
    if not ok(value):
        return (
            f"[{key!r}] = {value!r} ({type(value).__name__}), but the field in {config_name} is "
            f"{field_type.__name__}"
        )
    return None


def refused_overrides(sweep: Sweep, config_spec: str, cwd: str | None = None) -> list[str] | None:
    """The override keys of `sweep` (those of every run variant, in order) that its base config
    `config_spec` ("path:arg"), as this checkout has it, refuses as `check_overrides` does:
    fields renamed or removed since the sweep ran (a committed results/ folder). Its file is
    found from the current directory or else from `cwd` (the sweep's launch directory); None
    when it does not load."""
    path, _, arg = config_spec.partition(":")
    if not os.path.isfile(path) and cwd is not None:
        path = os.path.join(cwd, path)
    try:
        config = _load_config(path, arg)
    except (OSError, ImportError, SyntaxError, KeyError, ValueError, TypeError, AttributeError):
        return None
    refused: dict[str, None] = {}
    for overrides in (*sweep.run_variants.values(), *sweep.confirm_run_variants.values()):
        for key, value in overrides.items():
            if _refusal(config, path, key, value) is not None:
                refused[key] = None
    return list(refused)


def _check_wandb(variant: str, overrides: Mapping[str, Any], config) -> None:
    """A variant that logs to W&B without wandb installed would fail only when its turn comes,
    after the variants before it trained: refused with the other overrides instead."""
    try:
        project = overrides.get("train.wandb_project", config.train.wandb_project)
    except AttributeError:  # a config without the field
        return
    if project and importlib.util.find_spec("wandb") is None:
        raise ValueError(
            f"variants[{variant!r}] runs with train.wandb_project={project!r}, which needs the "
            "wandb package, not installed: pip install -r requirements-wandb.txt, or set it "
            "to '' (off)"
        )


def with_nuisance_default(sweep: Sweep) -> Sweep:
    """The sweep with nuisance_default read from its base config (unchanged without nuisance);
    raises ValueError when a default value is not in its grid (no untuned comparison).

    The config is read with the sweep's own config_arg, never "quick": a shrunk run may cap
    e.g. warmup, but the untuned setting stays the one the full sweep compares with."""
    if not sweep.nuisance:
        return sweep
    config = _load_config(sweep.config, sweep.config_arg)
    default = {key: config_path.get_value(key, config) for key in sweep.nuisance}
    return dataclasses.replace(sweep, nuisance_default=default)
