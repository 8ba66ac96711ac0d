"""Factorial sweeps in the spec: cells as variants, names, conflicts, subsets, JSON round trip."""

import json

import pytest
from sweep_fixtures import valid_kwargs

from transformer_jax.sweep import Factor, SplitFactor, Sweep

SCALE = Factor("scale", {"sqrt": {}, "none": {"model.attention.scale": "none"}})
HEADS = Factor("heads", {"h4": {}, "h1": {"model.attention.num_heads": 1}})


def factorial(**changes):
    kwargs = valid_kwargs(variants={}, baseline="", factors=(HEADS, SCALE))
    kwargs.update(changes)
    return Sweep(**kwargs)


def test_full_grid_by_default_names_join_levels_and_baseline_is_the_reference_cell():
    sweep = factorial()
    assert list(sweep.variants) == ["h4_sqrt", "h4_none", "h1_sqrt", "h1_none"]
    assert sweep.variants["h1_none"] == {
        "model.attention.num_heads": 1,
        "model.attention.scale": "none",
    }
    assert sweep.baseline == "h4_sqrt"
    assert sweep.cell_of("h1_none") == ("h1", "none")
    assert sweep.cells == (("h4", "sqrt"), ("h4", "none"), ("h1", "sqrt"), ("h1", "none"))
    assert sweep.is_factorial and sweep.trained_factors == (HEADS, SCALE)


def test_listed_cells_reference_out_of_names_and_flat_variants_beside():
    heads = Factor("heads", HEADS.levels, reference_in_name=False)
    sweep = factorial(
        factors=(heads, SCALE),
        cells=[{}, {"scale": "none"}, ("h1", "none")],
        variants={"learned": {"model.attention.scale": "learned"}},
    )
    # The names of a flat sweep that grew a factor: "none", "h1_none".
    assert list(sweep.variants) == ["sqrt", "none", "h1_none", "learned"]
    assert sweep.cell_of("learned") is None and sweep.baseline == "sqrt"
    with pytest.raises(ValueError, match="reference cell .* is not among the cells"):
        factorial(cells=[{"scale": "none"}])
    assert factorial(cells=[{"scale": "none"}], baseline="h4_none").baseline == "h4_none"


@pytest.mark.parametrize(
    "changes, match",
    [
        (
            {"factors": (HEADS, Factor("h", {"a": {}, "b": {"model.attention.num_heads": 2}}))},
            r"factor 'heads' \(level 'h1'\) sets model.attention.num_heads=1 but factor 'h' "
            r"\(level 'b'\) sets model.attention.num_heads=2",
        ),
        ({"cells": [{"size": "big"}]}, r"\['size'\] are not factors"),
        ({"cells": [("h4",)]}, "needs one level for each factor"),
        ({"cells": [{"scale": "half"}]}, "'half' is not a level of factor 'scale'"),
        ({"cells": [{}, ("h4", "sqrt")]}, "is listed twice"),
        ({"cells": []}, "must be None"),
        ({"factors": (HEADS, HEADS)}, "contain duplicates"),
        ({"factors": ("scale",)}, "must be a transformer_jax.sweep.Factor"),
        ({"factors": (SplitFactor("len", {"a": "test", "b": "test_long"}),)}, "at least one"),
        (
            {"factors": (HEADS, SCALE, SplitFactor("len", {"a": "test", "b": "test_long"}))},
            "no metric is listed for every one of its splits",
        ),
        ({"variants": {"h4_none": {"model.d_model": 8}}}, "a cell of the factors has this name"),
    ],
)
def test_factorial_validation_names_what_to_fix(changes, match):
    with pytest.raises(ValueError, match=match):
        factorial(**changes)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Factor("scale", {"only": {}}), "at least two"),
        (lambda: Factor("scale", {"a": {}, "b": {}}, reference="c"), "reference = 'c'"),
        (lambda: Factor("scale", {"a": {}, "b/c": {}}), "level name 'b/c'"),
        (lambda: Factor("scale", {"a": {}, "b": {"seed": 1}}), "overrides 'seed'"),
        (lambda: Factor("scale", {"a": {}, "b": {"model.x": None}}), "None cannot be passed"),
        (lambda: SplitFactor("len", {"a": "test", "b": "test"}), "name the same split"),
        (lambda: SplitFactor("len", {"a": "test", "b": "x/y"}), "must be a split name"),
    ],
)
def test_factor_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_factorial_sweep_round_trips_through_json():
    sweep = factorial(
        factors=(
            Factor("heads", HEADS.levels, reference="h1", reference_in_name=False),
            SCALE,
            SplitFactor("length", {"short": "test", "long": "test_long"}),
        ),
        cells=[{}, {"heads": "h4"}, {"scale": "none"}],
        variants={"wide": {"model.widths": [1, 2]}},
        metrics=("test/seq_accuracy", "test_long/seq_accuracy"),
    )
    assert list(sweep.variants) == ["sqrt", "h4_sqrt", "none", "wide"]
    assert sweep.split_metrics() == {
        "seq_accuracy": {"short": "test/seq_accuracy", "long": "test_long/seq_accuracy"}
    }
    d = json.loads(json.dumps(sweep.to_dict()))
    assert d["cells"] == [["h1", "sqrt"], ["h4", "sqrt"], ["h1", "none"]]
    assert d["factors"][2] == {
        "name": "length",
        "splits": {"short": "test", "long": "test_long"},
        "reference": "short",
    }
    again = Sweep.from_dict(d)
    assert again == sweep and list(again.variants) == list(sweep.variants)
    assert again.cell_of("h4_sqrt") == ("h4", "sqrt") and again.cell_of("wide") is None
    # A flat sweep's sweep.json is unchanged: no factor keys.
    assert "factors" not in Sweep(**valid_kwargs()).to_dict()
