"""ViT: tiny random ViTForImageClassification and ViTModel, noised, converted and compared
(tests/convert/parity.py). Float32 logits of two programs within 1e-5, the loss within 1e-6;
predictions and round-tripped bytes exactly."""

import os

import jax.numpy as jnp
import numpy as np
import pytest
from parity import convert, import_transformers, noised, round_trip_differences

from transformer_jax.convert import huggingface, vit
from transformer_jax.train import losses
from transformer_jax.train import step as steps

SIZES = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    image_size=8,
    patch_size=4,
)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    torch, transformers = import_transformers()
    torch.manual_seed(0)
    hf_model = transformers.ViTForImageClassification(transformers.ViTConfig(**SIZES, num_labels=3))
    noised(hf_model, torch)
    hf_dir, run, back = convert(hf_model, tmp_path_factory.mktemp("vit"))
    return torch, hf_model, hf_dir, run, back


def measurements(hf_model, torch, model, variables) -> dict:
    """The largest logit difference on a batch of images, the loss difference, and whether
    the predicted classes are identical."""
    images = np.random.default_rng(0).normal(size=(4, 8, 8, 3)).astype(np.float32)  # (B,Y,X,C)
    labels = np.array([0, 1, 2, 1])
    pixels = torch.tensor(images.transpose(0, 3, 1, 2))  # Hugging Face reads (B, C, Y, X)
    with torch.no_grad():
        out = hf_model(pixel_values=pixels, labels=torch.tensor(labels))
    hf_logits = out.logits.numpy()
    batch = {
        "inputs": jnp.asarray(images),
        "label": jnp.asarray(labels),
        "example_weights": jnp.ones(4),
    }
    logits, targets, weights, _ = steps.forward(model, variables, batch, train=False)
    loss_sum, weight_sum = losses.cross_entropy(logits, targets, weights)
    logits = np.asarray(logits)
    return {
        "logits": float(np.max(np.abs(logits - hf_logits))),
        "loss": abs(float(loss_sum / weight_sum) - float(out.loss)),
        "same_predictions": bool(np.array_equal(logits.argmax(-1), hf_logits.argmax(-1))),
    }


def test_converted_vit_matches_hugging_face(converted):
    torch, hf_model, _, run, _ = converted
    got = measurements(hf_model, torch, run.model, run.variables)
    assert got["logits"] < 1e-5
    assert got["loss"] < 1e-6
    assert got["same_predictions"]


def test_vit_round_trip_is_bit_exact(converted):
    _, _, hf_dir, _, back = converted
    assert round_trip_differences(hf_dir, huggingface.read_tensors(back)) == []


def test_a_wrong_vit_mapping_fails_every_comparison(converted):
    """Patches flattened (C, p, p) instead of (p, p, C): the convolution's own weight order."""
    torch, hf_model, hf_dir, run, _ = converted
    params = {k: v for k, v in run.state.params.items()}
    kernel = np.asarray(params["patch_embedding"]["kernel"])  # (p p C, D)
    wrong_kernel = kernel.reshape(4, 4, 3, 32).transpose(2, 0, 1, 3).reshape(48, 32)
    params["patch_embedding"] = {**params["patch_embedding"], "kernel": wrong_kernel}
    got = measurements(hf_model, torch, run.model, {"params": params})
    assert got["logits"] > 1e-3
    assert got["loss"] > 1e-4
    assert not got["same_predictions"]
    tensors = vit.to_tensors(params, run.model_config, "ViTForImageClassification")
    assert round_trip_differences(hf_dir, tensors) != []


def test_vit_model_converts_with_its_pooler_as_the_head(tmp_path):
    """ViTModel: the encoder states match last_hidden_state, tanh of the head the pooler."""
    torch, transformers = import_transformers()
    torch.manual_seed(1)
    hf_model = noised(transformers.ViTModel(transformers.ViTConfig(**SIZES)), torch)
    hf_dir, run, back = convert(hf_model, tmp_path)
    images = np.random.default_rng(1).normal(size=(2, 8, 8, 3)).astype(np.float32)
    with torch.no_grad():
        out = hf_model(pixel_values=torch.tensor(images.transpose(0, 3, 1, 2)))
    states = run.model.apply(run.variables, jnp.asarray(images), method=run.model.encode)
    head = run.model.apply(run.variables, jnp.asarray(images))
    assert np.max(np.abs(np.asarray(states) - out.last_hidden_state.numpy())) < 1e-5
    assert np.max(np.abs(np.tanh(np.asarray(head)) - out.pooler_output.numpy())) < 1e-5
    assert round_trip_differences(hf_dir, huggingface.read_tensors(back)) == []
    assert sorted(os.listdir(back)) == sorted(os.listdir(hf_dir))
