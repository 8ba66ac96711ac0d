"""The speed benchmark measures what it claims: its FLOP count agrees with XLA's, and its PyTorch
model is the same model (same logits, same losses and updates under the same optimizer)."""

import functools
import platform
import sys

import jax
import numpy as np
import pytest

from benchmarks import speed_configs
from benchmarks.timing import JaxRunner, model_flops_per_token, synthetic_batches
from transformer_jax.config import ModelConfig
from transformer_jax.models import build_model
from transformer_jax.train import host_memory
from transformer_jax.train import step as steps
from transformer_jax.train.optimizer import make_optimizer


def tiny(**fields):
    config = speed_configs.get_config("small")
    sizes = dict(d_model=64, num_heads=4, d_ff=256, num_decoder_layers=2, dropout_rate=0.0)
    config.model.update({**sizes, **fields})
    config.batch_size, config.seq_len = 4, 32
    config.model.max_len = 32
    return config


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_model_flops_agree_with_xla_count(activation):
    config = tiny(activation=activation, d_model=256, d_ff=1024, num_decoder_layers=3)
    cfg = ModelConfig(**config.model)
    batch = synthetic_batches(cfg, config.batch_size, config.seq_len, count=1)[0]
    runner = JaxRunner(cfg, config.train, batch)
    xla_per_token = runner.xla_flops() / batch["targets"].size
    # XLA also counts softmax, norms and the optimizer, which the 6 N + 12 L T D rule ignores.
    assert xla_per_token == pytest.approx(model_flops_per_token(cfg, config.seq_len), rel=0.1)


def test_model_flops_formula_by_hand():
    cfg = ModelConfig(**tiny().model)
    # Per layer: Q, K, V, O (4 * 64 * 64) and the feed-forward (2 * 64 * 256); output 64 * 256.
    weights = 2 * (4 * 64 * 64 + 2 * 64 * 256) + 64 * 256
    assert model_flops_per_token(cfg, 32) == 6 * weights + 12 * 2 * 32 * 64
    with pytest.raises(ValueError, match="model.family='encoder_decoder'"):
        model_flops_per_token(ModelConfig(family="encoder_decoder", vocab_size=8), 32)


def test_pytorch_reference_is_the_same_model_and_optimizer():
    torch = pytest.importorskip("torch")
    from benchmarks import torch_reference

    config = tiny()
    config.train.update(warmup_steps=2, steps=10)
    cfg = ModelConfig(**config.model)
    batches = synthetic_batches(cfg, config.batch_size, config.seq_len, count=3)
    model, optimizer = build_model(cfg), make_optimizer(config.train, cfg.d_model)
    state = steps.init_state(model, optimizer, batches[0], jax.random.key(0))
    reference = torch_reference.DecoderOnly(cfg)
    torch_reference.load_jax_params(reference, jax.device_get(state.params))
    torch_step = torch_reference.make_train_step(
        reference, torch_reference.make_optimizer(reference, config.train), config.train
    )
    jax_step = jax.jit(
        functools.partial(steps.train_step, model=model, optimizer=optimizer, label_smoothing=0.0)
    )
    for batch in batches:
        state, metrics = jax_step(state, batch)
        args, _ = steps.model_inputs("decoder_only", batch)
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
    pytest.importorskip("torch")
    from benchmarks import torch_reference

    with pytest.raises(ValueError, match="model.positional='rotary'"):
        torch_reference.DecoderOnly(ModelConfig(**tiny(positional="rotary").model))


def test_reuse_freed_memory_applies_with_glibc():
    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert host_memory.reuse_freed_memory() == expected
