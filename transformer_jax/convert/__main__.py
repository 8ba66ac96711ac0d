"""Command line: Hugging Face checkpoints in and out of run directories (docs/pretrained.md).

  python -m transformer_jax.convert --from_hf=gpt2_download --workdir=runs/gpt2
  python -m transformer_jax.convert --workdir=runs/gpt2 --to_hf=gpt2_export

--from_hf reads a local model directory (config.json and *.safetensors) of one of the
architectures in `CONVERTERS` and writes an ordinary run directory, which `generate`, the
analyses and `transformer_jax.train.restore.load_run` read; --to_hf writes a run back as a model
directory that transformers' `from_pretrained` loads. A field or tensor the mapping cannot
express exactly is refused with one error line naming it, before anything is written.
"""

import os

import jax
import numpy as np
from absl import app, flags, logging

from transformer_jax.commands import one_line_errors, parse_flags
from transformer_jax.convert import gpt2, huggingface, llama, run, vit

_FROM_HF = flags.DEFINE_string("from_hf", None, "A Hugging Face model directory to read.")
_TO_HF = flags.DEFINE_string("to_hf", None, "A Hugging Face model directory to write.")
_WORKDIR = flags.DEFINE_string("workdir", None, "The run directory written (--from_hf) or read.")
flags.mark_flags_as_required(["workdir"])

# Hugging Face architecture (config.json's "architectures") -> its mapping module.
CONVERTERS = {name: module for module in (gpt2, vit, llama) for name in module.ARCHITECTURES}


def converter(architecture: str):
    if architecture not in CONVERTERS:
        raise huggingface.Unsupported(
            f"architectures={[architecture]} is not supported; valid: {sorted(CONVERTERS)}"
        )
    return CONVERTERS[architecture]


def architecture_of(hf: dict) -> str:
    names = hf.get("architectures") or []
    if len(names) != 1:
        raise huggingface.Unsupported(
            f"architectures={names!r} must name one class; valid: {sorted(CONVERTERS)}"
        )
    return names[0]


def from_hf(directory: str, workdir: str) -> None:
    """Converts the model directory into the run directory `workdir`."""
    hf = huggingface.read_config(directory)
    architecture = architecture_of(hf)
    module = converter(architecture)
    cfg = module.model_config(hf, architecture)
    tensors = huggingface.read_tensors(directory)
    dtypes = sorted({str(x.dtype) for x in tensors.values()})
    if len(dtypes) != 1:
        raise huggingface.Unsupported(f"tensors of several dtypes {dtypes}; not supported")
    params = module.to_params(tensors, cfg, architecture)
    run.write_run(
        workdir, cfg, params, architecture=architecture, dtype=dtypes[0], source=directory
    )


def to_hf(workdir: str, directory: str) -> None:
    """Writes the run `workdir`'s latest checkpoint as a model directory."""
    from transformer_jax.train.restore import load_run

    if os.path.exists(os.path.join(directory, huggingface.CONFIG)):
        raise ValueError(f"--to_hf={directory} already holds a model; export to a new directory")
    original, conversion = run.read_conversion(workdir)
    loaded = load_run(workdir)
    cfg = loaded.model_config
    architecture = conversion.get("architecture") or _default_architecture(cfg)
    module = converter(architecture)
    if cfg.scan_layers:
        raise huggingface.Unsupported(
            "model.scan_layers=True stacks the layers' parameters; not supported: "
            "train with model.scan_layers=False"
        )
    hf = module.hf_config(cfg, original, architecture)
    field = run.differing_field(cfg, module.model_config(hf, architecture), module.IGNORED)
    if field is not None:
        name, value, valid = field
        raise huggingface.Unsupported(
            f"model.{name}={value!r} has no counterpart in {architecture}; valid: {valid!r}"
        )
    params = jax.tree.map(np.asarray, loaded.state.params)
    tensors = module.to_tensors(params, cfg, architecture)
    dtype = conversion.get("dtype", "float32")
    tensors = {name: x.astype(dtype) for name, x in tensors.items()}
    side = os.path.join(workdir, huggingface.HF_DIR)
    huggingface.write(directory, hf, tensors, side if os.path.isdir(side) else None)


def _default_architecture(cfg) -> str:
    """The architecture a run trained here (not converted) is exported as."""
    family = {"decoder_only": "LlamaForCausalLM", "vit": "ViTForImageClassification"}
    if cfg.family not in family:
        raise huggingface.Unsupported(
            f"model.family={cfg.family!r} has no Hugging Face counterpart here; valid: "
            f"{sorted(family)}"
        )
    if cfg.family == "decoder_only" and cfg.positional.kind == "learned":
        return "GPT2LMHeadModel"
    return family[cfg.family]


@one_line_errors("convert")
def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO.
    if (_FROM_HF.value is None) == (_TO_HF.value is None):
        raise ValueError("give exactly one of --from_hf=DIR (read) and --to_hf=DIR (write)")
    if _FROM_HF.value is not None:
        from_hf(_FROM_HF.value, _WORKDIR.value)
        print(f"wrote run directory {_WORKDIR.value}")
    else:
        to_hf(_WORKDIR.value, _TO_HF.value)
        print(f"wrote Hugging Face model directory {_TO_HF.value}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags("convert"))
