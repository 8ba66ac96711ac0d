"""A local Hugging Face model directory: config.json, *.safetensors, tokenizer files.

Read and written with the `safetensors` package's NumPy API (torch is not needed), so tensors
are NumPy arrays in the checkpoint's own dtype (bfloat16 through ml_dtypes, which jax ships).
"""

import glob
import json
import os
import shutil

import numpy as np

from transformer_jax import run_dir

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
# Files of a model directory that are neither weights nor its config, kept with a converted run
# (its HF_DIR) and written back by --to_hf: the tokenizer and the generation and preprocessing
# settings.
SIDE_FILES = (
    "generation_config.json",
    "preprocessor_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
)
# The sub-directory of a converted run that holds the model directory's config and side files.
HF_DIR = "huggingface"


class Unsupported(ValueError):
    """A checkpoint this converter cannot map exactly: the field, its value, what is valid."""


def check(field: str, value, valid) -> None:
    """Raises Unsupported unless `value` is one of `valid` (a tuple of values)."""
    if value not in valid:
        raise Unsupported(
            f"{field}={value!r} is not supported; valid: {', '.join(repr(v) for v in valid)}"
        )


# model.tokens fields <- config.json's special token ids.
_TOKEN_IDS = (("bos_id", "bos_token_id"), ("eos_id", "eos_token_id"), ("pad_id", "pad_token_id"))


def token_fields(hf: dict, defaults: dict) -> dict:
    """model.tokens overrides from config.json's bos/eos/pad_token_id (`defaults`: the
    architecture's own where config.json has none); -1 where the tokenizer has none (GPT-2 and
    Llama have no pad id, so id 0 is a real token). A pad id equal to BOS or EOS (a model that
    pads with EOS) becomes -1: padding is masked by the caller's mask, and that id stays a real
    token."""
    ids = {}
    for field, key in _TOKEN_IDS:
        value = hf.get(key, defaults.get(key))
        if isinstance(value, list):  # Llama 3's instruction-tuned models list several EOS ids
            if len(value) != 1:
                raise Unsupported(
                    f"{key}={value!r} lists several ids; not supported: model.tokens.{field} "
                    "is one id"
                )
            value = value[0]
        ids[field] = -1 if value is None else value
    if ids["pad_id"] in (ids["bos_id"], ids["eos_id"]):
        ids["pad_id"] = -1
    return {f"tokens.{field}": value for field, value in ids.items()}


def token_config(tokens, original: dict, defaults: dict) -> dict:
    """config.json's token ids for a run's model.tokens: none where `original`'s give the same
    ids (its own spelling is kept), else all three (None where there is none)."""
    ours = {f"tokens.{field}": getattr(tokens, field) for field, _ in _TOKEN_IDS}
    if token_fields(original, defaults) == ours:
        return {}
    return {key: None if getattr(tokens, f) == -1 else getattr(tokens, f) for f, key in _TOKEN_IDS}


def read_config(directory: str) -> dict:
    path = os.path.join(directory, CONFIG)
    if not os.path.exists(path):
        raise ValueError(f"--from_hf={directory} holds no {CONFIG}: not a Hugging Face model")
    return run_dir.read_json_object(path, "a model config", "download the model again")


def read_tensors(directory: str) -> dict[str, np.ndarray]:
    """Every tensor of the directory's *.safetensors files (one file or shards), by name."""
    from safetensors.numpy import load_file

    paths = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    if not paths:
        raise ValueError(
            f"--from_hf={directory} holds no *.safetensors weights (pytorch_model.bin is not "
            "read: save the model with safe_serialization=True)"
        )
    tensors = {}
    for path in paths:
        tensors.update(load_file(path))
    return tensors


def write(directory: str, config: dict, tensors: dict[str, np.ndarray], side_dir: str | None):
    """A model directory: config.json, one model.safetensors, and the side files of `side_dir`."""
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    tensors = {name: np.ascontiguousarray(x) for name, x in tensors.items()}
    save_file(tensors, os.path.join(directory, WEIGHTS), metadata={"format": "pt"})
    for name in SIDE_FILES if side_dir else ():
        if os.path.exists(os.path.join(side_dir, name)):
            shutil.copyfile(os.path.join(side_dir, name), os.path.join(directory, name))
    text = json.dumps(config, indent=2, sort_keys=True)
    run_dir.write_text(os.path.join(directory, CONFIG), text + "\n")


def copy_side_files(source: str, target: str) -> list[str]:
    """Copies `source`'s config.json and side files into `target`; returns the names copied."""
    os.makedirs(target, exist_ok=True)
    copied = []
    for name in (CONFIG, *SIDE_FILES):
        if os.path.exists(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(target, name))
            copied.append(name)
    return copied


def take(tensors: dict[str, np.ndarray], name: str, shape: tuple) -> np.ndarray:
    """tensors[name] as float32, checked against `shape`; removed from `tensors`, so that what
    is left at the end is what the mapping did not read."""
    if name not in tensors:
        raise ValueError(f"the checkpoint has no tensor {name!r}")
    x = tensors.pop(name)
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"tensor {name!r} has shape {tuple(x.shape)}; the config implies {shape}")
    return np.asarray(x, np.float32)


def check_all_read(tensors: dict[str, np.ndarray], ignored: tuple[str, ...] = ()) -> None:
    """Refuses tensors the mapping did not read (weights the model would silently lose), except
    those whose name ends with one of `ignored` (buffers such as a causal mask)."""
    left = sorted(name for name in tensors if not name.endswith(ignored))
    if left:
        more = f" and {len(left) - 1} more" if len(left) > 1 else ""
        raise Unsupported(
            f"tensor {left[0]!r}{more} has no counterpart in the model; not supported"
        )


def layer_norm(tensors, prefix: str, d: int) -> dict:
    """A LayerNorm's weight and bias (D,) -> the project's norm/{scale, bias}."""
    return {
        "norm": {
            "scale": take(tensors, f"{prefix}.weight", (d,)),
            "bias": take(tensors, f"{prefix}.bias", (d,)),
        }
    }


def layer_norm_tensors(norm: dict, prefix: str) -> dict:
    """The inverse of `layer_norm`."""
    return {f"{prefix}.weight": norm["norm"]["scale"], f"{prefix}.bias": norm["norm"]["bias"]}


def linear(tensors, prefix: str, fan_in: int, fan_out: int, bias: bool = True) -> dict:
    """An nn.Linear's weight (out, in) and bias (out,) -> a Dense kernel (in, out) and bias."""
    dense = {"kernel": take(tensors, f"{prefix}.weight", (fan_out, fan_in)).T}
    if bias:
        dense["bias"] = take(tensors, f"{prefix}.bias", (fan_out,))
    return dense


def linear_tensors(dense: dict, prefix: str) -> dict:
    """The inverse of `linear`."""
    out = {f"{prefix}.weight": np.asarray(dense["kernel"]).T}
    if "bias" in dense:
        out[f"{prefix}.bias"] = dense["bias"]
    return out
