"""The Sweep spec: validation with messages that name the field, JSON round trip, loading a
sweep file and checking its overrides against the base config."""

import importlib.util
import json
import os

import pytest
from sweep_fixtures import SWEEP_FILE, valid_kwargs

from transformer_jax.sweep import Sweep, check_overrides, load_sweep
from transformer_jax.sweep.spec import refused_overrides

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"baseline": "c"}, r"baseline = 'c': must be one of the variants \['a', 'b'\]"),
        ({"variants": {}}, "variants = {}: must be a non-empty dict"),
        ({"variants": {"a/b": {}}}, "variant name 'a/b'"),
        ({"variants": {"a": {"model attention": 1}}}, "key 'model attention'"),
        ({"variants": {"a": {"seed": 1}}}, "overrides 'seed'"),
        ({"variants": {"a": {"model.x": None}}}, r"variants\['a'\]\['model.x'\] = None"),
        ({"variants": {"a": {"model.x": float("nan")}}}, "must be a finite number"),
        ({"seeds": ()}, r"seeds = \(\): must be a non-empty"),
        ({"seeds": (0, 0)}, "contains duplicates"),
        ({"seeds": (0, -1)}, r"seeds = \(0, -1\) holds -1; valid seeds"),
        ({"seeds": (True,)}, r"seeds = \(True,\) holds True"),
        ({"metrics": ()}, r"metrics = \(\): must be a non-empty"),
        ({"metrics": ("accuracy",)}, "metrics contains 'accuracy': must be 'split/metric'"),
        ({"metrics": ("test/",)}, "metrics contains 'test/'"),
        ({"config": "configs/copy"}, "config = 'configs/copy': must be the path of a .py"),
        ({"config": "configs/algorithmic.py:quick"}, "put the get_config argument in config_arg"),
    ],
)
def test_sweep_validation_errors_name_field_and_value(changes, match):
    with pytest.raises(ValueError, match=match):
        Sweep(**valid_kwargs(**changes))


def test_sweep_normalizes_and_round_trips_through_json():
    sweep = Sweep(**valid_kwargs(seeds=[0, 1], variants={"a": {}, "b": {"model.widths": [1, 2]}}))
    assert sweep.seeds == (0, 1)
    assert sweep.variants["b"]["model.widths"] == (1, 2)
    assert Sweep.from_dict(json.loads(json.dumps(sweep.to_dict()))) == sweep


def test_load_sweep_uses_docstring_and_checks_file(tmp_path):
    path = tmp_path / "s.py"
    path.write_text(SWEEP_FILE)
    sweep = load_sweep(str(path))
    assert sweep.description.startswith("Scaling helps")
    no_doc = [line for line in SWEEP_FILE.splitlines() if not line.startswith('"""')]
    path.write_text("\n".join(no_doc))
    with pytest.raises(ValueError, match="description of .* is empty"):
        load_sweep(str(path))
    path.write_text("def get_sweep():\n    return {}\n")
    with pytest.raises(ValueError, match="returned dict; it must return"):
        load_sweep(str(path))
    path.write_text("x = 1\n")
    with pytest.raises(ValueError, match="defines no get_sweep"):
        load_sweep(str(path))
    with pytest.raises(ValueError, match="does not exist"):
        load_sweep(str(tmp_path / "nope.py"))


@pytest.mark.parametrize("name", ["README.md", "s.py"])
def test_a_sweep_file_that_is_not_python_is_named(tmp_path, name):
    """A README given as --sweep (not .py: importlib finds no loader for it) or a file with a
    syntax error: a ValueError naming the file and the line, not a traceback."""
    path = tmp_path / name
    path.write_text("# A sweep\n\nIt's not Python.\n")
    with pytest.raises(ValueError, match=r"sweep file .* is not Python \(.*, line 3\); valid"):
        load_sweep(str(path))


def test_check_overrides_against_the_config(project):
    def check(overrides):
        check_overrides(
            Sweep(**valid_kwargs(config="configs/fake.py", variants={"a": overrides})), ""
        )

    check({"model.d_model": 8, "model.dropout": 0, "model.widths": (1,)})
    with pytest.raises(ValueError, match="'model.dmodel', which is not a field"):
        check({"model.dmodel": 8})
    with pytest.raises(
        ValueError, match=r"\['model.d_model'\] = 8.5 \(float\), but the field .* is int"
    ):
        check({"model.d_model": 8.5})
    with pytest.raises(ValueError, match="config flags can only override"):
        check({"model.note": "x"})
    with pytest.raises(ValueError, match="does not exist"):
        check_overrides(Sweep(**valid_kwargs(variants={"a": {}})), "")


def test_refused_overrides_are_those_check_overrides_refuses_in_order(project, tmp_path):
    """A committed sweep's overrides against the config as it is now: renamed fields (a flat
    name, a sub-config set to a value), a value of another type; None for a config gone."""
    variants = {
        "a": {},
        "b": {"model.attention_scale": "none", "model.d_model": 16},
        "c": {"model.attention": "none", "model.dropout": 0, "model.tied": 1},
        "d": {"model.attention_scale": "none", "model.attention.scale": "none"},
    }
    sweep = Sweep(**valid_kwargs(config="configs/fake.py", variants=variants))
    refused = refused_overrides(sweep, "configs/fake.py:quick")
    assert refused == ["model.attention_scale", "model.attention", "model.tied"]
    for key in refused:  # each as check_overrides refuses it
        only = Sweep(**valid_kwargs(config="configs/fake.py", variants={"a": {}, "b": {key: 1}}))
        with pytest.raises(ValueError, match=r"variants\['b'\]"):
            check_overrides(only, "quick")
    valid = {"a": {}, "b": {"model.attention.scale": "none", "model.widths": (3,)}}
    assert refused_overrides(Sweep(**valid_kwargs(variants=valid)), "configs/fake.py") == []
    # Launched from elsewhere: the config found from the sweep's launch directory.
    os.chdir(tmp_path / "experiments")
    assert refused_overrides(sweep, "configs/fake.py", cwd=str(tmp_path)) == refused
    assert refused_overrides(sweep, "configs/gone.py", cwd=str(tmp_path)) is None


def test_a_wandb_variant_without_wandb_is_refused_before_any_run(monkeypatch):
    """Caught with the overrides, not when that variant's turn comes after the others trained."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name)
    )
    repo_config = os.path.join(REPO, "configs", "algorithmic.py")
    variants = {"a": {}, "b": {"train.wandb_project": "p"}}
    sweep = Sweep(**valid_kwargs(config=repo_config, variants=variants, config_arg="copy"))
    with pytest.raises(ValueError, match=r"variants\['b'\] runs with train.wandb_project='p', wh"):
        check_overrides(sweep, "copy")
    variants["b"] = {"train.wandb_project": ""}
    check_overrides(Sweep(**valid_kwargs(config=repo_config, variants=variants)), "copy")


def test_tuned_keeps_sequential_confirmation_and_the_grid_extension():
    from transformer_jax.sweep.nuisance import GridExtension

    base = Sweep(**valid_kwargs(equivalence_margins={"test/seq_accuracy": 0.02}))
    extension = GridExtension(max_rounds=2, margin=0.02, keys=("train.learning_rate",))
    tuned = base.tuned(
        nuisance={"train.learning_rate": (1e-3, 1e-2)},
        select_on="validation/loss",
        select_mode="min",
        confirm_seeds=(10, 11, 12, 13),
        confirm_rounds=(2, 4),
        grid_extension=extension,
    )
    assert tuned.confirm_rounds == (2, 4)
    assert tuned.spending == base.spending
    assert tuned.grid_extension.keys == ("train.learning_rate",)
    assert tuned.grid_extension.max_rounds == 2
