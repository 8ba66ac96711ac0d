"""Whether a run can fit the machine at all, from its config alone, before anything is built.

A config far beyond the machine (model.d_model=1e9, model.ffn.d_ff=1e12, data.batch_size=1e8,
model.num_encoder_layers=1e6, a position table of 1e9 rows) would otherwise fail deep inside
XLA with a traceback, be killed by the kernel's OOM killer without a word, or spend minutes
building a model that cannot train. `check_fits` estimates, from the model config and the
data's lengths, a lower bound of what training holds at once: the parameters, their gradients
and the optimizer's slots, a position table, the activations each layer application saves for
the backward pass (its input, batch x length x d_model, however the layer is rematerialised)
and the logits; every estimate counts less than the run needs, so a config it refuses cannot
fit, and one it passes may still need more (the compiled step is the exact figure:
train/group_memory.py, transformer_jax.aot). The limit is the machine's memory: the host's
RAM (MemTotal) for the CPU, the allocators' limits summed over the devices for GPUs and TPUs,
the published capacity of the chips a slice is compiled for (aot/chips.py); as
decoding/memory.py does for a beam search.
"""

import dataclasses

from transformer_jax.layers.positional import ENCODINGS

_FLOAT32 = 4
_GIB = 2**30
_OPTIMIZER_SLOTS = {"adam": 2, "adamw": 2, "sgd": 0}  # sgd with momentum keeps one


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A lower bound of a run's training memory, in bytes, by part."""

    num_params: int
    params_bytes: int  # parameters, gradients and optimizer slots
    table_bytes: int  # a position table of max_len rows
    activation_bytes: int  # saved layer inputs and the logits of one micro-batch

    @property
    def total(self) -> int:
        return self.params_bytes + self.table_bytes + self.activation_bytes


def _layer_params(d: int, d_ff: int, gated: bool, cross: bool) -> int:
    """A lower bound of one block's weights: the query and output projections of each
    attention (keys and values may be shared across heads) and the feed-forward matrices."""
    attention = 2 * d * d
    return attention * (2 if cross else 1) + (3 if gated else 2) * d * d_ff


def estimate(model_config, train_cfg, batch_size: int, lengths: tuple[int, int]) -> Estimate:
    """`Estimate` of a run of `model_config` (ModelConfig, resolved from the data) trained by
    `train_cfg` (TrainConfig) on batches of `batch_size` rows of (input, target) `lengths`."""
    from transformer_jax.families import FAMILIES
    from transformer_jax.layers.feedforward import ACTIVATIONS

    family = FAMILIES[model_config.family]
    d, vocab = model_config.d_model, model_config.vocab_size
    gated = ACTIVATIONS[model_config.ffn.activation].gated
    stacks = []  # (layers, length, has cross-attention)
    encoder_length = lengths[0] if family.decodes == "source" else max(lengths)
    if family.reads_images:
        encoder_length = model_config.vit.num_patches
    if family.decodes != "prompt":
        stacks.append((model_config.num_encoder_layers, encoder_length, False))
    if family.decodes is not None:
        cross = family.decodes == "source"
        stacks.append((model_config.num_decoder_layers, lengths[1] or max(lengths), cross))
    universal = model_config.universal
    params = 0 if family.reads_images else vocab * d
    saved = 0  # float32 values kept for the backward pass, per row
    for layers, length, cross in stacks:
        blocks = min(layers, 1) if universal is not None else layers  # shared weights
        params += blocks * _layer_params(d, model_config.ffn.d_ff, gated, cross)
        applications = universal.num_steps(layers) if universal is not None else layers
        saved += applications * length * d
    table = 0
    if ENCODINGS[model_config.positional.kind].limited_to_table:  # sinusoidal, learned
        table = model_config.positional.max_len * d * _FLOAT32  # max_len x d_model
    logits = (lengths[1] or max(lengths)) * (model_config.num_classes or vocab)
    rows = max(batch_size // train_cfg.grad_accum_steps, 1)
    slots = _OPTIMIZER_SLOTS[train_cfg.optimizer] + bool(train_cfg.momentum)
    return Estimate(
        num_params=params,
        params_bytes=params * (2 + slots) * _FLOAT32,
        table_bytes=table,
        activation_bytes=rows * (saved + logits) * _FLOAT32,
    )


def machine_bytes(devices=None, platform: str | None = None) -> tuple[int, str] | None:
    """(bytes, what they are) of the memory a run on `devices` (default: this process's) can
    use, or None when it cannot be told."""
    import jax

    devices = list(devices) if devices is not None else jax.devices()
    platform = platform or devices[0].platform
    if platform == "cpu":
        total = _mem_total()
        return None if total is None else (total, "this host's RAM")
    limits = []
    for device in devices:
        try:
            stats = device.memory_stats() or {}
        except Exception:  # compile-only devices (an aot slice) have no allocator
            stats = {}
        limits.append(stats.get("bytes_limit"))
    if all(limits):
        return sum(limits), f"the memory of {len(devices)} {platform.upper()} device(s)"
    from transformer_jax.aot.chips import chip_of_device_kind

    chip = chip_of_device_kind(devices[0].device_kind)
    if chip is None:
        return None
    return int(chip.hbm_bytes * len(devices)), f"the HBM of {len(devices)} {chip.name} chip(s)"


def _mem_total() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_fits(model_config, train_cfg, batch_size: int, lengths, limit) -> None:
    """Raises a ValueError naming the field that dominates the estimate, the estimate and the
    machine's memory, when `estimate` exceeds `limit` ((bytes, what), or None: unchecked)."""
    if limit is None:
        return
    found = estimate(model_config, train_cfg, batch_size, lengths)
    limit_bytes, what = limit
    if found.total <= limit_bytes:
        return
    parts = {
        "parameters": found.params_bytes,
        "position table": found.table_bytes,
        "activations": found.activation_bytes,
    }
    largest = max(parts, key=parts.get)
    fields = {
        "parameters": _largest_model_field(model_config),
        "position table": (
            f"model.positional.max_len={model_config.positional.max_len} "
            f"({model_config.positional.kind!r} positions)"
        ),
        "activations": _largest_activation_field(model_config, batch_size),
    }
    raise ValueError(
        f"{fields[largest]} cannot fit: training would hold at least "
        f"{found.total / _GIB:,.1f} GiB ({found.num_params:,} parameters; {largest} "
        f"{parts[largest] / _GIB:,.1f} GiB), more than {what} ({limit_bytes / _GIB:,.1f} GiB); "
        "valid: a smaller value"
    )


def _largest_model_field(model_config) -> str:
    """The model size furthest above its default: the field that makes the parameters large."""
    from transformer_jax.config import ModelConfig

    default = ModelConfig()
    return _furthest(
        model_config,
        default,
        ("d_model", "vocab_size", "num_encoder_layers", "num_decoder_layers"),
        {f"model.ffn.d_ff={model_config.ffn.d_ff}": model_config.ffn.d_ff / default.ffn.d_ff},
    )


def _largest_activation_field(model_config, batch_size: int) -> str:
    """The field furthest above its default among those the activations grow with: the batch,
    the width, the depth or the Universal Transformer's steps."""
    from transformer_jax.config import ModelConfig

    default = ModelConfig()
    extra = {f"data.batch_size={batch_size}": batch_size / 64}  # the configs' default batch
    if model_config.universal is not None and model_config.universal.steps:
        steps = model_config.universal.steps
        extra[f"model.universal.steps={steps}"] = steps / default.num_encoder_layers
    return _furthest(
        model_config, default, ("d_model", "num_encoder_layers", "num_decoder_layers"), extra
    )


def _furthest(model_config, default, names, extra: dict[str, float]) -> str:
    """`field=value` of the largest ratio to its default among model fields `names` and
    `extra` (label -> ratio)."""
    ratios = dict(extra)
    for name in names:
        value = getattr(model_config, name)
        ratios[f"model.{name}={value}"] = value / max(getattr(default, name), 1)
    return max(ratios, key=ratios.get)
