"""What the converter's parity tests measure, shared by the architectures: a tiny Hugging Face
model with every weight noised, saved, converted, and compared with the converted run, and the
run written back. Each measurement returns numbers, so that a test asserts them within tolerance
for the right mapping and outside it for a deliberately wrong one.

transformers and torch come from requirements.txt and requirements-bench.txt; without them the
tests skip, except under CI (CI=true), where they fail."""

import os

import jax
import jax.numpy as jnp
import numpy as np
from optional_packages import require

from transformer_jax import decoding
from transformer_jax.convert import huggingface
from transformer_jax.convert.__main__ import from_hf, to_hf
from transformer_jax.train import losses
from transformer_jax.train import step as steps
from transformer_jax.train.restore import load_run

BOS, EOS, PAD = 1, 2, 0  # the tiny models' ids: this project's conventions


def import_transformers():
    """(torch, transformers), or a skip with the reason (a failure under CI)."""
    torch = require("torch", "PyTorch", "requirements-bench.txt")
    return torch, require("transformers", "transformers", "requirements.txt")


def noised(model, torch, seed: int = 0, scale: float = 0.2):
    """`model` with N(0, scale^2) added to every weight (norm gains included), so that no
    parameter sits at its initial value (ones, zeros) where a mapping bug would not show."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            noise = torch.randn(parameter.shape, generator=generator) * scale
            parameter.add_(noise)
    return model.eval()


def convert(hf_model, tmp_path):
    """Saves `hf_model`, converts it, exports the run back -> (hf dir, run, exported dir)."""
    hf_dir, workdir, back = (os.path.join(tmp_path, name) for name in ("hf", "run", "back"))
    hf_model.save_pretrained(hf_dir)
    from_hf(hf_dir, workdir)
    to_hf(workdir, back)
    return hf_dir, load_run(workdir), back


def round_trip_differences(hf_dir, exported_tensors) -> list[str]:
    """The tensor names whose bytes (dtype, shape, values) differ between the model directory
    and the exported tensors, or that only one of them holds."""
    original = huggingface.read_tensors(hf_dir)
    names = sorted(set(original) | set(exported_tensors))
    return [
        name
        for name in names
        if name not in original
        or name not in exported_tensors
        or original[name].dtype != exported_tensors[name].dtype
        or original[name].tobytes() != np.asarray(exported_tensors[name]).tobytes()
    ]


def random_ids(vocab_size: int, shape, seed: int = 0) -> np.ndarray:
    """Token ids in [3, V): no special id of this project's conventions."""
    return np.random.default_rng(seed).integers(3, vocab_size, size=shape).astype(np.int64)


def lm_measurements(hf_model, torch, model, variables, vocab_size: int) -> dict:
    """A causal LM's comparisons: the largest logit difference on a batch, the loss difference,
    whether greedy continuations are identical, and the largest logit difference over the real
    positions of a right-padded batch."""
    ids = random_ids(vocab_size, (3, 12))
    with torch.no_grad():
        hf_logits = hf_model(torch.tensor(ids)).logits.numpy()
    logits = np.asarray(model.apply(variables, jnp.asarray(ids, jnp.int32)))

    # The loss: this project's decoder reads BOS, y_1 .. y_{T-1} (families.py shift_right);
    # Hugging Face's reads the same ids with BOS given explicitly, labels shifted inside.
    bos_ids = np.concatenate([np.full((3, 1), BOS), ids], axis=1)
    with torch.no_grad():
        hf_loss = float(hf_model(torch.tensor(bos_ids), labels=torch.tensor(bos_ids)).loss)
    batch = {"targets": jnp.asarray(ids, jnp.int32), "example_weights": jnp.ones(3)}
    out, targets, weights, _ = steps.forward(model, variables, batch, train=False)
    loss_sum, weight_sum = losses.cross_entropy(out, targets, weights)
    loss = float(loss_sum / weight_sum)

    # Greedy: this project's decoding reads BOS, the prompt, and never emits PAD or BOS.
    prompt = ids[:, :4]
    ours = decoding.generate(
        model, variables, jnp.asarray(prompt, jnp.int32), decoding.DecodeConfig(max_new_tokens=8)
    )
    with torch.no_grad():
        theirs = hf_model.generate(
            torch.tensor(np.concatenate([np.full((3, 1), BOS), prompt], axis=1)),
            attention_mask=torch.ones((3, 5), dtype=torch.long),
            max_new_tokens=8,
            do_sample=False,
            suppress_tokens=[PAD, BOS],
            eos_token_id=EOS,
            pad_token_id=PAD,
        ).numpy()[:, 5:]
    ours = np.asarray(ours)[:, 4:]

    # Right padding: row 1 keeps 7 real tokens; PAD is id 0 here, masked by the model.
    padded = ids.copy()
    padded[1, 7:] = PAD
    mask = (padded != PAD).astype(np.int64)
    with torch.no_grad():
        hf_padded = hf_model(torch.tensor(padded), attention_mask=torch.tensor(mask)).logits
    ours_padded = np.asarray(model.apply(variables, jnp.asarray(padded, jnp.int32)))
    real = mask.astype(bool)
    return {
        "logits": float(np.max(np.abs(logits - hf_logits))),
        "loss": abs(loss - hf_loss),
        "greedy_equal": theirs.shape == ours.shape and bool(np.array_equal(theirs, ours)),
        "padded": float(np.max(np.abs(ours_padded[real] - hf_padded.numpy()[real]))),
    }


def transposed(params, path, shape):
    """`params` with the kernel at `path` transposed as a `shape` matrix: an injected mapping
    bug (a Conv1D read as an nn.Linear, or the reverse)."""
    params = jax.tree.map(np.array, params)
    node = params
    for key in path[:-1]:
        node = node[key]
    kernel = node[path[-1]]
    node[path[-1]] = kernel.reshape(shape).T.reshape(kernel.shape)
    return params


def swapped(params, path_a, path_b):
    """`params` with the leaves at two paths (tuples of keys) exchanged: an injected mapping bug."""
    params = jax.tree.map(np.array, params)

    def at(tree, path):
        for key in path[:-1]:
            tree = tree[key]
        return tree

    a, b = at(params, path_a), at(params, path_b)
    a[path_a[-1]], b[path_b[-1]] = b[path_b[-1]], a[path_a[-1]]
    return params
