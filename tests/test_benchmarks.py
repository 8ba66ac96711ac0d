"""The speed benchmark measures what it claims: its FLOP count agrees with XLA's, and its PyTorch
model is the same model (same logits, same losses and updates under the same optimizer).

PyTorch comes from requirements-bench.txt. Without it the PyTorch tests are skipped, except under
CI (CI=true, as .ci/run sets), where a missing PyTorch fails them instead of hiding them."""

import functools
import os
import platform
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from optional_packages import require

from benchmarks import speed_configs
from benchmarks.timing import JaxRunner, synthetic_batches, typed_configs
from transformer_jax.aot.estimate import model_flops_per_token
from transformer_jax.config import ModelConfig
from transformer_jax.models import build_model, family_of
from transformer_jax.train import host_memory
from transformer_jax.train import step as steps
from transformer_jax.train.optimizer import make_optimizer


def import_torch():
    """PyTorch, or a skip with the reason; under CI (CI=true) a missing PyTorch is a failure."""
    return require("torch", "PyTorch", "requirements-bench.txt")


def tiny(overrides=None):
    """The `small` benchmark shrunk for tests -> (config, typed model config, typed train config);
    `overrides`: dotted model fields, as on the command line."""
    config = speed_configs.get_config("small")
    config.batch_size, config.seq_len = 4, 32
    sizes = {
        "d_model": 64,
        "attention.num_heads": 4,
        "ffn.d_ff": 256,
        "num_decoder_layers": 2,
        "dropout_rate": 0.0,
        "positional.max_len": 32,
    }
    cfg, train_config = typed_configs(config)
    return config, cfg.override({**sizes, **(overrides or {})}), train_config


# The gated feed-forward's third matrix is the only difference: a second compile (~10 s), slow.
@pytest.mark.parametrize("activation", ["gelu", pytest.param("swiglu", marks=pytest.mark.slow)])
def test_model_flops_agree_with_xla_count(activation):
    overrides = {"ffn.activation": activation, "d_model": 256, "ffn.d_ff": 1024}
    config, cfg, train_config = tiny({**overrides, "num_decoder_layers": 3})
    batch = synthetic_batches(cfg, config.batch_size, config.seq_len, count=1)[0]
    runner = JaxRunner(cfg, train_config, batch)
    xla_per_token = runner.xla_flops() / batch["targets"].size
    # XLA also counts softmax, norms and the optimizer, which the 6 N + 12 L T D rule ignores.
    assert xla_per_token == pytest.approx(model_flops_per_token(cfg, config.seq_len), rel=0.1)


def test_model_flops_formula_by_hand():
    _, cfg, _ = tiny()
    # Per layer: Q, K, V, O (4 * 64 * 64) and the feed-forward (2 * 64 * 256); output 64 * 256.
    weights = 2 * (4 * 64 * 64 + 2 * 64 * 256) + 64 * 256
    assert model_flops_per_token(cfg, 32) == 6 * weights + 12 * 2 * 32 * 64
    with pytest.raises(ValueError, match="model.family='encoder_decoder'"):
        model_flops_per_token(ModelConfig(family="encoder_decoder", vocab_size=8), 32)


def test_pytorch_reference_is_the_same_model_and_optimizer():
    torch = import_torch()
    from benchmarks import torch_reference

    config, cfg, train_config = tiny()
    train_config = train_config.replace(warmup_steps=2, steps=10)
    batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=3)
    model, optimizer = build_model(cfg), make_optimizer(train_config, cfg.d_model)
    state = steps.init_state(model, optimizer, batches[0], jax.random.key(0))
    reference = torch_reference.DecoderOnly(cfg)
    torch_reference.load_jax_params(reference, jax.device_get(state.params))
    torch_step = torch_reference.make_train_step(
        reference, torch_reference.make_optimizer(reference, train_config), train_config
    )
    jax_step = jax.jit(
        functools.partial(steps.train_step, model=model, optimizer=optimizer, label_smoothing=0.0)
    )
    for batch in batches:
        state, metrics = jax_step(state, batch)
        args, _ = family_of(cfg).inputs(batch, cfg.tokens)
        inputs, targets = (
            torch.tensor(np.asarray(x), dtype=torch.long) for x in (args[0], batch["targets"])
        )
        loss = torch_step(inputs, targets).item()
        assert loss == pytest.approx(float(metrics["loss"]), rel=1e-5)
    got = reference.state_dict()["layers.1.ffn.wo.weight"].numpy()
    # Adam divides by sqrt(v) + 1e-9: where a gradient is ~0, rounding differences of the two
    # frameworks' gradients become visible in the update (at most ~3% of one lr-sized step).
    want = state.params["decoder"]["layer_1"]["ffn"]["wo"]["kernel"].T
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_unsupported_pytorch_configs_name_the_field():
    import_torch()
    from benchmarks import torch_reference

    _, cfg, _ = tiny({"positional.kind": "rotary"})
    with pytest.raises(ValueError, match=r"model\.positional\.kind='rotary'"):
        torch_reference.DecoderOnly(cfg)
    with pytest.raises(ValueError, match=r"model\.universal=UniversalConfig"):
        torch_reference.DecoderOnly(
            cfg.override({"positional.kind": "learned", "universal.steps": 2})
        )


# A model whose tokenizer has PAD 5, no BOS and EOS 7 (id 0 is a real token).
OTHER_IDS = {"tokens.pad_id": 5, "tokens.bos_id": -1, "tokens.eos_id": 7}


def test_synthetic_tokens_and_decoding_skip_the_models_own_special_ids():
    from benchmarks.decode_speed import without_eos

    _, cfg, _ = tiny(OTHER_IDS)
    (batch,) = synthetic_batches(cfg, 64, 32, count=1)
    assert not np.isin(batch["targets"], [5, 7]).any()
    assert np.isin([0, 1, 2, 3], batch["targets"]).all()  # ordinary ids here
    (batch,) = synthetic_batches(tiny()[1], 64, 32, count=1)
    assert batch["targets"].min() == 3  # the datasets' PAD 0, BOS 1, EOS 2: none drawn
    step = without_eos(lambda cache, ids_B: (jnp.zeros((2, 256)), cache), cfg.tokens)
    logits = np.asarray(step(None, jnp.zeros(2, jnp.int32))[0])
    assert np.isneginf(logits[:, 7]).all() and np.isfinite(np.delete(logits, 7, axis=1)).all()


def test_pytorch_reference_loss_ignores_the_models_pad():
    torch = import_torch()
    from benchmarks import torch_reference

    _, cfg, train_config = tiny(OTHER_IDS)
    reference = torch_reference.DecoderOnly(cfg)
    optimizer = torch_reference.make_optimizer(reference, train_config)
    step = torch_reference.make_train_step(reference, optimizer, train_config)
    inputs = torch.tensor([[0, 3, 4, 0, 6, 8]])
    targets = torch.tensor([[3, 4, 0, 7, 5, 5]])  # id 0 a real target, PAD 5 at the end
    with torch.no_grad():
        logits = reference(inputs).float()
    real = targets != 5
    expected = torch.nn.functional.cross_entropy(logits[real], targets[real]).item()
    assert step(inputs, targets).item() == pytest.approx(expected, rel=1e-5)


def test_reuse_freed_memory_applies_with_glibc():
    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert host_memory.reuse_freed_memory() == expected


def test_sweep_speed_counts_a_seed_group_as_one_process(tmp_path):
    import json

    from benchmarks.sweep_speed import mean_breakdown

    for variant, seeds in (("a", (0, 1, 2)), ("b", (0, 1, 2))):
        for seed in seeds:
            run = tmp_path / variant / f"seed_{seed}"
            run.mkdir(parents=True)
            timing = {"train": 10.0 if variant == "a" else 20.0, "total": 30.0 + seed}
            (run / "summary.json").write_text(json.dumps({"status": "finished", "timing": timing}))
    runs, grouped = mean_breakdown(tmp_path, grouped=True)
    assert runs == 6 and grouped["processes"] == 2 and grouped["train"] == 15.0
    runs, separate = mean_breakdown(tmp_path, grouped=False)
    assert runs == 6 and separate["processes"] == 6 and separate["total"] == 31.0


def test_grid_speed_trains_the_same_runs_both_ways_and_counts_processes(tmp_path):
    """The old way: one seed group per rate; the new: one run group with every rate and seed,
    in the same run directories; a process's breakdown is counted once."""
    import json

    from benchmarks.grid_speed import chosen_rate, commands, largest_difference, phase_sums

    old = commands("per_rate", tmp_path, "c.py", ["1e-3", "2e-3"], [0, 1], ["train.steps=2"])
    assert [argv[-2:] for argv in old] == [
        ["--seeds=0,1", "--config.train.learning_rate=1e-3"],
        ["--seeds=0,1", "--config.train.learning_rate=2e-3"],
    ]
    assert old[0][4:6] == [
        "--config.train.steps=2",
        f"--workdir={tmp_path / 'learning_rate-0.001'}",
    ]
    ((*_, workdir, runs),) = commands("one_group", tmp_path, "c.py", ["1e-3", "2e-3"], [0, 1], [])
    assert workdir == f"--workdir={tmp_path}"
    assert json.loads(runs.removeprefix("--runs=")) == {
        f"learning_rate-{rate}/seed_{seed}": {"seed": seed, "train.learning_rate": rate}
        for rate in (0.001, 0.002)
        for seed in (0, 1)
    }
    summaries = {
        f"learning_rate-{rate}/seed_{seed}": {"timing": {"train": rate * 1000, "total": 9.0}}
        for rate in (0.001, 0.002)
        for seed in (0, 1)
    }
    per_rate = phase_sums(summaries, "per_rate")
    assert per_rate["processes"] == 2 and per_rate["train"] == 3.0 and per_rate["total"] == 18.0
    assert phase_sums(summaries, "one_group")["processes"] == 1
    # The choice reads the mean validation loss over a rate's seeds, not one seed's best.
    losses = {(0.001, 0): 1.0, (0.001, 1): 3.0, (0.002, 0): 1.5, (0.002, 1): 1.6}
    for (rate, seed), loss in losses.items():
        summary = summaries[f"learning_rate-{rate}/seed_{seed}"]
        summary["metrics"] = {"validation": {"loss": loss, "accuracy": 0.5}}
    assert chosen_rate(summaries) == "learning_rate-0.002"
    other = json.loads(json.dumps(summaries))
    other["learning_rate-0.001/seed_1"]["metrics"]["validation"]["accuracy"] = 1.0
    other["learning_rate-0.002/seed_0"]["metrics"]["validation"]["loss"] = 1.65
    assert largest_difference(summaries, other) == (
        "learning_rate-0.001/seed_1 validation/accuracy",
        1.0,
    )
    name, worst = largest_difference(summaries, other, "validation/loss")
    assert name == "learning_rate-0.002/seed_0 validation/loss" and worst == pytest.approx(0.1)


@pytest.mark.slow
def test_grid_speed_runs_a_tiny_cell_both_ways(tmp_path):
    """The benchmark end to end on a tiny cell (2 rates x 1 seed, 2 steps): both ways train
    every run and it prints their table, the metrics' difference and the ratio."""
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    tiny = [
        "train.steps=2",
        "train.log_every=1",
        "train.eval_every=2",
        "train.checkpoint_every=2",
        "train.warmup_steps=0",
        "train.evaluators.generation.enabled=False",
        "model.d_model=16",
        "model.ffn.d_ff=32",
        f"data.data_dir={tmp_path / 'tfds'}",
        "data.num_train=64",
        "data.num_test=16",
        "data.num_test_long=16",
        "data.num_validation=16",
    ]
    command = [sys.executable, "-m", "benchmarks.grid_speed", "--rates=1e-3,2e-3", "--seeds=0"]
    command += [f"--set={','.join(tiny)}", f"--keep={tmp_path / 'runs'}"]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.strip()}
    assert rows["per_rate"][2:4] == ["2", "2"] and rows["one_group"][2:4] == ["2", "1"]
    assert "largest relative difference of a final metric" in done.stdout
    assert "chosen on the mean validation/loss: per_rate learning_rate-0.00" in done.stdout
    assert "ratio: " in done.stdout


@pytest.mark.slow
def test_loop_cost_bare_step_is_the_trainers_own_step(tmp_path):
    """Like for like: the bare step the loop-cost benchmark times is the trainer's step on the
    trainer's batches, so its losses are the trainer's logged ones (one step a window), bit for
    bit, and the loop's share is loop, not a different program."""
    import json

    from benchmarks.timing import TrainerStep, char_lm_config
    from transformer_jax.train import trainer

    preset = speed_configs.get_config("small")
    preset.batch_size, preset.seq_len = 2, 16
    config = char_lm_config(preset, steps=3)
    config.data.data_dir = str(tmp_path / "tfds")
    config.model.update(d_model=32, num_decoder_layers=1)
    config.model.ffn.d_ff = 64
    assert config.train.log_every == 1 and config.data.batch_size == 2
    trainer.train_and_evaluate(config, str(tmp_path / "run"))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    logged = [line["loss"] for line in map(json.loads, lines) if line["split"] == "train"]
    bare = TrainerStep(config, count=3)
    assert [float(bare.step(batch)["loss"]) for batch in bare.batches] == logged


@pytest.mark.slow
def test_loop_cost_runs_the_trainer_beside_pytorch_at_a_tiny_size(tmp_path):
    """The benchmark end to end at 4 steps a round: it prints each round, the bare step, the
    trainer's step in the loop and the loop's share, the loop alone, and PyTorch's step."""
    import subprocess
    from pathlib import Path

    import_torch()
    repo = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "benchmarks.loop_cost", "--steps=4", "--bare_steps=2"]
    command += ["--batch_size=2", "--seq_len=16", "--rounds=1"]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = ("round 2 (ms per step): waiting", "bare jitted train step, waiting for each:")
    for line in (*expected, "loop share against bare ahead", "the loop alone", "pytorch eager:"):
        assert line in done.stdout, done.stdout


def test_torch_attention_kernels_times_two_kernels_of_one_function():
    """Both of PyTorch's kernels compute the same causal attention (the benchmark prints their
    difference), and each round prints one line of times."""
    import subprocess
    from pathlib import Path

    import_torch()
    repo = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "benchmarks.torch_attention_kernels", "--rounds=2"]
    command += ["--batch=2", "--heads=2", "--length=16", "--head_dim=8"]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    difference = float(done.stdout.split("max |fused - math| output: ")[1].split()[0])
    assert difference < 1e-5
    assert done.stdout.count(" ms (one layer, forward and backward)") == 2


def test_loop_share_is_the_part_of_a_step_the_bare_step_leaves():
    from benchmarks.timing import loop_share  # flag-free: loop_cost's flags clash with others'

    assert loop_share(0.105, 0.100) == pytest.approx(0.05 / 1.05)
    assert loop_share(0.1, 0.1) == 0.0
