"""The ahead-of-time compiler compiles the trainer's own description of a run: the trainer's
`prepare` for the slice's devices, with its checks, the dataset's registered facts, and the
choices written "auto" made for the slice's platform, not this CPU's."""

import subprocess
import sys

import jax
import ml_collections
import pytest
from tiny_configs import tiny_copy_config

from transformer_jax import defaults
from transformer_jax.aot.programs import attention_path, compile_train, plan_run
from transformer_jax.aot.topology import get_topology
from transformer_jax.data import DATASETS
from transformer_jax.data.info import DatasetInfo
from transformer_jax.data.registry import DatasetEntry
from transformer_jax.train.trainer import prepare

pytestmark = pytest.mark.usefixtures("libtpu")


@pytest.mark.parametrize(
    "model, train",
    [
        ({}, {"evaluators": {"no_such_evaluator": {}}}),
        ({}, {"evaluators": {"generation": {"splits": ("no_such_split",)}}}),
        ({}, {"evaluators": {"bleu": {"every": 0}}}),
        ({}, {"early_stop_metric": "no_such_split/loss"}),
        ({"scan_layers": True}, {"evaluators": {"generation": {"enabled": True}}}),
    ],
)
def test_the_trainer_and_the_compiler_refuse_a_run_alike(tmp_path, model, train):
    """The checks the compiler once skipped: the same error from both, for one device."""
    config = tiny_copy_config(tmp_path / "data", model=model, **train)
    with pytest.raises(ValueError) as trained:
        prepare(config)
    with pytest.raises(ValueError) as compiled:
        plan_run(config, get_topology("v5e:1x1"))
    assert str(compiled.value) == str(trained.value)


def _command(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, "--config=configs/algorithmic.py:copy", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_main_and_aot_print_the_same_error_line(tmp_path):
    bad = "--config.train.evaluators.generation.splits=('no_such_split',)"
    trained = _command("transformer_jax.main", f"--workdir={tmp_path / 'run'}", bad)
    compiled = _command("transformer_jax.aot", "--topology=v5e:1x1", bad)
    assert trained.returncode == compiled.returncode == 2
    lines = [r.stderr.strip().splitlines()[-1] for r in (trained, compiled)]
    assert lines[0].startswith("main: error: train.evaluators.generation.splits contains")
    assert lines[0].removeprefix("main: ") == lines[1].removeprefix("aot: ")
    assert not (tmp_path / "run").exists()


def _toy_defaults(name: str) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.seq_len = 32  # tokens per row
    return config


def _toy_facts(cfg) -> DatasetInfo:
    return DatasetInfo(cfg.name, "lm", 40, 0, cfg.seq_len, ("test",), None)


def _never_built(cfg):
    raise AssertionError("compiling a run must not read its data")


def test_a_newly_registered_dataset_compiles_from_its_facts_alone(monkeypatch):
    """A dataset entry with facts (and data that cannot be read) is all the compiler needs."""
    monkeypatch.setitem(
        DATASETS._entries, "toy_lm", DatasetEntry(_toy_defaults, _never_built, _toy_facts)
    )
    config = defaults.base_config("toy_lm")
    config.data.batch_size = 8
    config.model.update(family="decoder_only", d_model=32, num_decoder_layers=1)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 64
    target = plan_run(config, get_topology("v5e:1x1"))
    assert target.prepared.model_config.vocab_size == 40  # from the facts
    program = compile_train(target)
    assert program.compiled, program.error
    assert program.tokens == 8 * 32


def test_auto_attention_is_resolved_for_the_platform_compiled_for(tmp_path):
    """On this CPU, "auto" is the einsum path; compiled for one v5e chip it is the TPU's path,
    the splash kernel, in the model the programs are built from; on 8 chips the jax path."""
    config = tiny_copy_config(tmp_path / "data")
    assert config.model.attention.impl == "auto" and jax.default_backend() == "cpu"
    tpu = plan_run(config, get_topology("v5e:1x1"))
    assert attention_path(tpu) == "splash" == tpu.prepared.model.config.attention.impl
    slice_8 = plan_run(config, get_topology("v5e:2x4"))
    assert slice_8.prepared.model.config.attention.impl == "jax"
    assert tpu.prepared.platform == "tpu"
    here = prepare(config, compile_for=jax.devices())
    assert here.model.config.attention.impl == "einsum"
    assert here.resolved["model"]["attention"]["impl"] == "auto"  # config.json: as written
