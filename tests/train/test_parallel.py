"""Scale-out: layouts agree with one device, accumulation with one big batch, checkpoints move
between device counts, configs are validated, and bfloat16 compute keeps float32 results."""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_model, tiny_sgd

from transformer_jax.config import TrainConfig
from transformer_jax.models import build_model
from transformer_jax.train import parallel as par
from transformer_jax.train import step as steps
from transformer_jax.train.optimizer import make_optimizer

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("parallel_cases.py")


def run_case(devices: int, *args) -> dict:
    env = {
        **os.environ,
        # Added to the suite's flags (tests/conftest.py).
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} "
        f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
    }
    out = subprocess.run(
        [sys.executable, str(CASES), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,  # a guard against a hang, not a speed: 8 layouts compile here
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# Each layout compiles its own step. The fast tier checks four that between them cover jit on 8
# devices, fsdp, pmap, accumulation and a seed group; the slow tier the other three of
# parallel_cases.LAYOUTS, in a process of its own.
FAST_LAYOUTS = ["jit8", "fsdp2", "accum2_pmap8", "group8_sharded"]
SLOW_LAYOUTS = ["pmap8", "accum4", "group8"]


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sharded_checkpoint")
    return run_case(8, "steps", directory, ",".join(FAST_LAYOUTS)), directory


@pytest.fixture(scope="module")
def slow_layouts(tmp_path_factory):
    return run_case(8, "steps", tmp_path_factory.mktemp("slow_layouts"), ",".join(SLOW_LAYOUTS))


def check_matches_one_device(result, layout):
    assert result["devices"] == 8
    assert result[layout]["loss"] == pytest.approx(result["reference_loss"], rel=1e-5)
    assert result[layout]["max_param_diff"] < 1e-5


@pytest.mark.parametrize("layout", FAST_LAYOUTS)
def test_layouts_match_one_device(eight_devices, layout):
    check_matches_one_device(eight_devices[0], layout)


@pytest.mark.slow
@pytest.mark.parametrize("layout", SLOW_LAYOUTS)
def test_more_layouts_match_one_device(slow_layouts, layout):
    check_matches_one_device(slow_layouts, layout)


def test_a_group_of_as_many_seeds_as_devices_gives_each_seed_its_own(eight_devices):
    result, _ = eight_devices
    assert result["group8_sharded"]["spec"] == [["data", "fsdp"]]  # the seed axis, split


@pytest.mark.slow
def test_a_group_of_fewer_seeds_than_devices_splits_each_seeds_batch(slow_layouts):
    assert slow_layouts["group8"]["spec"] == []  # 2 seeds: replicated, each seed's batch split


def test_fsdp_shards_parameters(eight_devices):
    result, _ = eight_devices
    assert result["fsdp_sharded_leaves"] > 0
    assert result["save"]["saved_shards"] == 8  # (2, 4) mesh: every device holds a piece.


def test_checkpoint_from_8_devices_restores_on_1(eight_devices):
    _, directory = eight_devices
    result = run_case(1, "restore", directory)
    assert result["devices"] == 1
    assert result["step"] == 1 and result["data_state"] == {"position": 1}
    assert result["max_param_diff"] == 0.0


@pytest.mark.parametrize(
    "fields, batch_size, match",
    [
        ({"parallelism": "shard_map"}, 16, "train.parallelism='shard_map'.*'jit', 'pmap'"),
        ({"fsdp": 3}, 16, r"train.fsdp=3 must divide the device count 8; valid: \[1, 2, 4, 8\]"),
        ({"fsdp": 2, "parallelism": "pmap"}, 16, "needs train.parallelism='jit'"),
        ({"grad_accum_steps": 0}, 16, "train.grad_accum_steps=0"),
        ({}, 12, r"data.batch_size=12 .* 8 device.*multiples of 8, e.g. \[8, 16, 24, 32\]"),
        ({"grad_accum_steps": 4}, 16, "multiples of 32"),
    ],
)
def test_bad_parallel_config(fields, batch_size, match):
    with pytest.raises(ValueError, match=match):
        par.check_parallel_config(TrainConfig(**fields), batch_size, num_devices=8)


def test_fsdp_spec_shards_largest_divisible_dimension():
    assert par.fsdp_spec((16, 64), 4) == jax.sharding.PartitionSpec(None, "fsdp")
    assert par.fsdp_spec((6, 5), 4) == jax.sharding.PartitionSpec()  # nothing divides: replicate
    assert par.fsdp_spec((), 4) == jax.sharding.PartitionSpec()
    assert par.fsdp_spec((16, 64), 1) == jax.sharding.PartitionSpec()


def _tiny_step(dtype: str):
    cfg = tiny_model("decoder_only", num_decoder_layers=1, dtype=dtype)
    train = tiny_sgd(grad_clip_norm=1.0)
    model, optimizer = build_model(cfg), make_optimizer(train, cfg.d_model)
    targets = np.random.default_rng(0).integers(3, 13, size=(4, 8)).astype(np.int32)
    batch = {"targets": targets, "example_weights": np.ones(4, np.float32)}
    state = steps.init_state(model, optimizer, batch, jax.random.PRNGKey(0))
    step = functools.partial(steps.train_step, model=model, optimizer=optimizer, label_smoothing=0)
    return model, state, batch, jax.jit(step)


def test_bfloat16_compute_keeps_float32_params_logits_and_loss():
    model, state, batch, step = _tiny_step("bfloat16")
    logits, *_ = steps.forward(model, {"params": state.params}, batch, train=False)
    assert logits.dtype == jnp.float32
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.params))
    new_state, metrics = step(state, batch)
    assert metrics["loss"].dtype == jnp.float32 and np.isfinite(float(metrics["loss"]))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(new_state.params))
    # bfloat16 compute stays close to float32 compute (about 3 significant digits).
    _, _, _, step32 = _tiny_step("float32")
    assert float(metrics["loss"]) == pytest.approx(float(step32(state, batch)[1]["loss"]), rel=2e-2)


def test_setup_runtime_sets_compilation_cache(tmp_path):
    previous = jax.config.jax_compilation_cache_dir
    try:
        par.setup_runtime(TrainConfig(compilation_cache_dir=str(tmp_path)))
        assert jax.config.jax_compilation_cache_dir == str(tmp_path)
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)
