"""The analysis commands' flags: each command's set, defaults and required flags, and the shared
definitions they are built from."""

import math

import pytest
from absl import flags

from transformer_jax.analysis import (
    amy,
    attention_maps,
    confusion,
    ponder,
    positional_heatmap,
    softmax_temperature,
)
from transformer_jax.analysis.flags import define_common_flags

READ_TEXT = {"workdir": None, "input": None, "target": None, "step": None, "out": None}
# command, its required flags, every flag -> default.
COMMANDS = [
    (
        amy,
        {"out"},
        {
            "sentence": "Amy gave Bob a book",
            "shuffled": "Bob gave Amy a book",
            "token": "Amy",
            "positional": "sinusoidal",
            "workdir": None,
            "seed": 0,
            "out": None,
        },
    ),
    (attention_maps, {"workdir", "input", "out"}, READ_TEXT),
    (confusion, {"workdir", "out"}, {"workdir": None, "split": None, "step": None, "out": None}),
    (ponder, {"workdir", "input", "out"}, READ_TEXT),
    (
        positional_heatmap,
        {"out"},
        {"kind": "sinusoidal", "positions": 100, "d_model": 64, "base": 10000.0, "out": None},
    ),
    (
        softmax_temperature,
        {"out"},
        {
            "scores": ["3.9", "3.2", "1.0", "0.3", "1.1"],
            "tau": math.sqrt(5.0),
            "max_log2_dk": 10,
            "num_keys": 16,
            "samples": 2000,
            "seed": 0,
            "out": None,
        },
    ),
]


def _flags_of(command) -> flags.FlagValues:
    fv = flags.FlagValues()
    command._define_flags(fv)
    return fv


@pytest.mark.parametrize(
    "command, required, defaults", COMMANDS, ids=[c[0].__name__.split(".")[-1] for c in COMMANDS]
)
def test_command_flags_defaults_and_required(command, required, defaults):
    fv = _flags_of(command)
    assert {name: fv[name].default for name in fv} == defaults
    fv(["prog", *(f"--{name}=x" for name in sorted(required))])
    assert {name: fv[name].value for name in fv} == {**defaults, **dict.fromkeys(required, "x")}
    for missing in required:
        given = [f"--{name}=x" for name in sorted(required - {missing})]
        with pytest.raises(flags.IllegalFlagValueError, match=f"--{missing} must have a value"):
            _flags_of(command)(["prog", *given])


def test_shared_flags_have_one_definition():
    helps = {}
    for command, _, defaults in COMMANDS:
        fv = _flags_of(command)
        for name in {"input", "target", "step", "out"} & set(defaults):
            helps.setdefault(name, set()).add(fv[name].help)
    assert {name: len(texts) for name, texts in helps.items()} == dict.fromkeys(helps, 1)
    # --workdir is reworded where it means something narrower.
    assert "random weights" in _flags_of(amy)["workdir"].help
    assert "act=True" in _flags_of(ponder)["workdir"].help
    assert _flags_of(confusion)["workdir"].help == "A run directory written by training."


def test_define_common_flags():
    fv = flags.FlagValues()
    define_common_flags("workdir", "step", "out", workdir="A run.", flag_values=fv)
    assert fv["workdir"].help == "A run." and fv["out"].help == "Output PNG path."
    fv(["prog", "--step=3", "--out=a.png"])
    assert fv.step == 3 and fv.workdir is None
    with pytest.raises(ValueError, match=r"flags \['split'\] are not shared flags"):
        define_common_flags("split", flag_values=flags.FlagValues())
    with pytest.raises(ValueError, match=r"flags \['input'\] are required or reworded but not in"):
        define_common_flags("out", required=("input",), flag_values=flags.FlagValues())
