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


def convert(hf_model, tmp_path, tokenizer=None):
    """Saves `hf_model` (and a `tokenizers.Tokenizer` as its tokenizer.json), converts it,
    exports the run back -> (hf dir, run, exported dir)."""
    hf_dir, workdir, back = (os.path.join(tmp_path, name) for name in ("hf", "run", "back"))
    hf_model.save_pretrained(hf_dir)
    if tokenizer is not None:
        tokenizer.save(os.path.join(hf_dir, "tokenizer.json"))
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


def random_ids(tokens, vocab_size: int, shape, seed: int = 0) -> np.ndarray:
    """Token ids in [3, V): no special id of the model (`tokens`: its model.tokens); ids 0-2
    are left out too, since the trainer's teacher forcing still reads id 0 as padding and
    feeds BOS as id 1 (families.py shift_right)."""
    special = [i for i in (tokens.pad, tokens.bos, tokens.eos) if i is not None]
    choices = np.setdiff1d(np.arange(3, vocab_size), special)
    return np.random.default_rng(seed).choice(choices, size=shape).astype(np.int64)


def _hf_generate(hf_model, torch, tokens, ids, mask, max_new_tokens: int) -> np.ndarray:
    """Hugging Face's greedy continuation under this project's decoding rules: PAD and BOS
    never chosen, a row stops at EOS and is then filled with PAD (EOS where there is none)."""
    fill = tokens.pad if tokens.pad is not None else tokens.eos
    with torch.no_grad():
        out = hf_model.generate(
            torch.tensor(ids),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            suppress_tokens=[i for i in (tokens.pad, tokens.bos) if i is not None] or None,
            eos_token_id=tokens.eos,
            pad_token_id=fill,
        )
    return out.numpy()[:, ids.shape[1] :]


def lm_measurements(hf_model, torch, model, variables, vocab_size: int) -> dict:
    """A causal LM's comparisons: the largest logit difference on a batch (with id 0 among
    its tokens where the Hugging Face model has no pad id), the loss difference,
    whether greedy continuations are identical, and the largest logit difference over the real
    positions of a right-padded batch."""
    tokens = model.config.tokens
    ids = random_ids(tokens, vocab_size, (3, 12))
    # Where the Hugging Face model has no pad id, id 0 is a real token: the unmasked batch
    # holds some.
    read = ids.copy()
    if hf_model.config.pad_token_id is None:
        read[:, 5] = 0
    with torch.no_grad():
        hf_logits = hf_model(torch.tensor(read)).logits.numpy()
    logits = np.asarray(model.apply(variables, jnp.asarray(read, jnp.int32)))

    # The loss: this project's decoder reads BOS, y_1 .. y_{T-1} (families.py shift_right);
    # Hugging Face's reads the same ids with BOS given explicitly, labels shifted inside.
    bos_ids = np.concatenate([np.full((3, 1), tokens.bos), ids], axis=1)
    with torch.no_grad():
        hf_loss = float(hf_model(torch.tensor(bos_ids), labels=torch.tensor(bos_ids)).loss)
    batch = {"targets": jnp.asarray(ids, jnp.int32), "example_weights": jnp.ones(3)}
    out, targets, weights, _ = steps.forward(model, variables, batch, train=False)
    loss_sum, weight_sum = losses.cross_entropy(out, targets, weights)
    loss = float(loss_sum / weight_sum)

    # Greedy: this project's decoding prepends BOS to the prompt.
    prompt = ids[:, :4]
    ours = decoding.generate(
        model, variables, jnp.asarray(prompt, jnp.int32), decoding.DecodeConfig(max_new_tokens=8)
    )
    bos_prompt = np.concatenate([np.full((3, 1), tokens.bos), prompt], axis=1)
    theirs = _hf_generate(hf_model, torch, tokens, bos_prompt, np.ones_like(bos_prompt), 8)
    ours = np.asarray(ours)[:, 4:]

    # Right padding: row 1 keeps 7 real tokens, masked by an explicit mask on both sides.
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    padded = np.where(mask == 1, ids, 0)
    with torch.no_grad():
        hf_padded = hf_model(torch.tensor(padded), attention_mask=torch.tensor(mask)).logits
    ours_padded = np.asarray(
        model.apply(variables, jnp.asarray(padded, jnp.int32), valid_BT=jnp.asarray(mask, bool))
    )
    real = mask.astype(bool)
    return {
        "logits": float(np.max(np.abs(logits - hf_logits))),
        "loss": abs(loss - hf_loss),
        "greedy_equal": theirs.shape == ours.shape and bool(np.array_equal(theirs, ours)),
        "padded": float(np.max(np.abs(ours_padded[real] - hf_padded.numpy()[real]))),
    }


def left_padded_measurements(hf_model, torch, model, variables, vocab_size: int) -> dict:
    """A left-padded batch of prompts (BOS first after each row's padding; 12, 7 and 4 real
    tokens, the padding id 0, which is a real token where the model has no PAD): the largest
    logit difference over the real positions, positions counted from each row's first real
    token, and whether the greedy continuations are identical."""
    tokens = model.config.tokens
    real = np.array([12, 7, 4])
    drawn = random_ids(tokens, vocab_size, (3, 11), seed=1)
    ids = np.zeros((3, 12), np.int64)  # (B, T)
    for row, n in enumerate(real):
        ids[row, 12 - n :] = np.r_[tokens.bos, drawn[row, : n - 1]]
    mask = np.arange(12)[None, :] >= (12 - real)[:, None]
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    with torch.no_grad():
        hf_logits = hf_model(
            torch.tensor(ids),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            position_ids=torch.tensor(positions),
        ).logits.numpy()
    logits = np.asarray(
        model.apply(
            variables,
            jnp.asarray(ids, jnp.int32),
            valid_BT=jnp.asarray(mask),
            positions_BT=jnp.asarray(positions, jnp.int32),
        )
    )
    ours = decoding.generate(
        model,
        variables,
        jnp.asarray(ids, jnp.int32),
        decoding.DecodeConfig(max_new_tokens=8),
        prompt_valid_BP=jnp.asarray(mask),
    )
    theirs = _hf_generate(hf_model, torch, tokens, ids, mask, 8)
    ours = np.asarray(ours)[:, 12:]
    return {
        "logits": float(np.max(np.abs(logits[mask] - hf_logits[mask]))),
        "greedy_equal": theirs.shape == ours.shape and bool(np.array_equal(theirs, ours)),
    }


def check_lm_parity(hf_model, torch, model, variables, vocab_size: int, *, wrong=False):
    """Every causal-LM comparison within tolerance (float32 logits of two programs within
    1e-4, the loss within 1e-5, greedy tokens identical, right- and left-padded batches), or,
    with `wrong` (a deliberately wrong mapping), every one outside it."""
    got = lm_measurements(hf_model, torch, model, variables, vocab_size)
    left = left_padded_measurements(hf_model, torch, model, variables, vocab_size)
    logits = {"logits": got["logits"], "padded": got["padded"], "left_padded": left["logits"]}
    greedy = {"greedy": got["greedy_equal"], "left_padded_greedy": left["greedy_equal"]}
    if wrong:
        assert min(logits.values()) > 1e-2 and got["loss"] > 1e-3, (logits, got["loss"])
        assert not any(greedy.values()), greedy
    else:
        assert max(logits.values()) < 1e-4 and got["loss"] < 1e-5, (logits, got["loss"])
        assert all(greedy.values()), greedy


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
