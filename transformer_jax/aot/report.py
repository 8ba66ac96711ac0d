"""What `python -m transformer_jax.aot` prints: per program, memory against the chip, XLA's
counts and the roofline estimate (for the train step, also from the analytic traffic count,
aot/traffic.py: the two give a range); and the one error line of a run that does not fit."""

import ml_collections
from ml_collections.config_flags import config_path

from transformer_jax import defaults
from transformer_jax.aot.chips import GIB
from transformer_jax.aot.estimate import Estimate, model_flops_per_token, roofline
from transformer_jax.aot.fit import Fit
from transformer_jax.aot.programs import Program, Target, attention_path, needed_bytes
from transformer_jax.data.abstract import split_lengths
from transformer_jax.families import family_of
from transformer_jax.sweep.spec import load_sweep


def run_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """An experiment config as it is; a benchmark config (benchmarks/speed_configs.py: model,
    train, seq_len and batch_size, no data) as rows of `seq_len` tokens of its vocabulary, the
    batches benchmarks/train_speed.py times (described as unpacked lm1b rows: no data read)."""
    if "data" in config:
        return config
    run = defaults.base_config("lm1b")
    run.model = config.model
    run.train = config.train
    run.data.update(
        seq_len=config.seq_len,
        batch_size=config.batch_size,
        packing=False,
        spm_vocab_size=config.model.vocab_size,
    )
    return run


def sweep_variant(path: str, variant: str | None = None) -> tuple[str, ml_collections.ConfigDict]:
    """(its name, the config) of a sweep file's run of `variant` (by default its baseline), as
    the sweep would start it."""
    sweep = load_sweep(path)
    variant = sweep.baseline if variant is None else variant
    if variant not in sweep.variants:
        raise ValueError(
            f"--variant={variant} is not a variant of {path}; its variants: "
            f"{', '.join(sweep.variants)}"
        )
    config = defaults.from_file(sweep.config, sweep.config_arg or None)
    for key, value in sweep.variants[variant].items():
        config_path.set_value(key, config, value)
    return f"{path} (variant {variant!r}: {sweep.config_spec})", config


def gib(n: float) -> str:
    return f"{n / GIB:,.2f}"


def header(target: Target, path: str, train_step: Program | None = None) -> list[str]:
    """The lines above the programs' figures: the slice and chip, the model and layout; with the
    compiled `train_step`, the attention path it took (programs.py `attention_path`)."""
    chip, topology = target.topology.chip, target.topology
    cfg, train = target.prepared.model_config, target.prepared.train_cfg
    layout = (
        "pmap (jax.pmap over the slice's devices)"
        if target.parallel.kind == "pmap"
        else f"jit, train.fsdp={train.fsdp}"
    )
    return [
        f"{path} on {topology.name}: {topology.num_chips} x {topology.devices[0].device_kind} "
        f"({chip.name}: {chip.peak_flops / 1e12:,.3g} TFLOP/s, {gib(chip.hbm_bytes)} GiB "
        f"HBM, {chip.hbm_bandwidth / 1e9:,.4g} GB/s per chip; {chip.source})",
        f"{cfg.family}, {cfg.dtype}, scan_layers={cfg.scan_layers}, remat={cfg.remat}, "
        f"attention {attention_path(target, train_step)} (model.attention.impl for "
        f"{target.prepared.platform}); batch {target.batch_size} "
        f"({target.batch_size // topology.num_chips} per chip), "
        f"grad_accum_steps={train.grad_accum_steps}; {layout}",
    ]


def model_flops(target: Target, program: Program) -> float | None:
    """6 N + 12 L T D per token, per chip, for a decoder-only train step; else None."""
    cfg = target.prepared.model_config
    if program.name != "train" or cfg.family != "decoder_only":
        return None
    seq_len = split_lengths(target.prepared.info, "train")[1]
    per_token = model_flops_per_token(cfg, seq_len)
    return per_token * program.tokens / target.topology.num_chips


def estimate(target: Target, program: Program, bytes_accessed: float | None = None) -> Estimate:
    """The roofline of `program` from XLA's bytes accessed, or from `bytes_accessed`, against
    the chip's peak for the model's compute dtype (a GPU's float32 runs at its TF32 rate)."""
    return roofline(
        program.flops,
        program.bytes_accessed if bytes_accessed is None else bytes_accessed,
        target.topology.chip.at_dtype(target.prepared.model_config.dtype),
        tokens=program.tokens,
        model_flops=model_flops(target, program),
    )


def estimates(target: Target, program: Program) -> list[Estimate]:
    """The roofline from XLA's bytes, then (a train step) from the analytic traffic count."""
    found = [estimate(target, program)]
    if program.traffic is not None:
        found.append(estimate(target, program, program.traffic.total))
    return found


def step_range(target: Target, program: Program) -> tuple[str, str]:
    """("a-b ms (bound)", "c-d units/s"): the estimates' range, fastest rate last."""
    found = sorted(estimates(target, program), key=lambda e: e.seconds)
    low, high = found[0], found[-1]
    bounds = "/".join(dict.fromkeys(e.bound for e in found))
    if len(found) == 1 or f"{low.seconds * 1e3:,.1f}" == f"{high.seconds * 1e3:,.1f}":
        time_text = f"{low.seconds * 1e3:,.1f} ms ({bounds})"
        rate_text = f"{low.tokens_per_s:,.0f} {unit(target)}/s"
    else:
        time_text = f"{low.seconds * 1e3:,.1f}-{high.seconds * 1e3:,.1f} ms ({bounds})"
        rate_text = f"{high.tokens_per_s:,.0f}-{low.tokens_per_s:,.0f} {unit(target)}/s"
    return time_text, rate_text


def unit(target: Target) -> str:
    return "images" if family_of(target.prepared.model_config).classifier else "tokens"


def traffic_text(program: Program) -> str:
    t = program.traffic
    return (
        f"analytic HBM traffic {t.total / 1e9:,.3f} GB per chip (weights "
        f"{t.weights / 1e9:,.3f}, gradients {t.gradients / 1e9:,.3f}, optimizer "
        f"{t.optimizer / 1e9:,.3f}, saved activations {t.activations / 1e9:,.3f})"
    )


def program_line(target: Target, program: Program) -> str:
    if not program.compiled:
        return f"{program.name}: not compiled: {program.error}"
    m, chip = program.memory, target.topology.chip
    line = (
        f"{program.name}: compiled; HBM {gib(program.total_bytes)} of {gib(chip.hbm_bytes)} "
        f"GiB per chip (arguments {gib(m['arguments'])}, outputs {gib(m['outputs'])}, aliased "
        f"{gib(m['aliased'])}, temporaries {gib(m['temporaries'])}, code {gib(m['code'])}); "
        f"XLA {program.flops / 1e12:,.4f} TFLOP and {program.bytes_accessed / 1e9:,.3f} GB "
        "accessed per chip"
    )
    if program.traffic is not None:
        line += f"; {traffic_text(program)}"
    if program.loops:
        return line + " (its decoding loop counted once: no time estimate)"
    if not program.flops:
        return line + " (no counts: no time estimate)"
    mfu = "MFU" if model_flops(target, program) is not None else "XLA-FLOPs utilisation"
    found = estimates(target, program)
    time_text, rate_text = step_range(target, program)
    best = max(e.mfu_bound for e in found)
    source = "XLA's bytes and the analytic count" if len(found) > 1 else "XLA's bytes"
    return line + (
        f"; roofline estimate from {source}: {time_text}, {rate_text}, {mfu} at most "
        f"{best:.0%} (estimates on published chip figures, not measurements)"
    )


def group_line(target: Target, one: Program, group: Program) -> str:
    """A run group's roofline step against its members' solo steps run one after the other
    (XLA's bytes for both: the analytic count has no group form)."""
    size = group.tokens // one.tokens
    if not (one.compiled and group.compiled and one.flops and group.flops):
        return f"run group of {size}: no comparison (a step without counts or not compiled)"
    together, alone = estimate(target, group).seconds, estimate(target, one).seconds
    return (
        f"run group of {size}: roofline {together * 1e3:,.2f} ms per step against "
        f"{size} x {alone * 1e3:,.3f} = {size * alone * 1e3:,.2f} ms for its members one after "
        f"another (ratio {size * alone / together:.2f}); HBM {gib(group.total_bytes)} against "
        f"{gib(one.total_bytes)} GiB for one. The roofline leaves out per-step launch and host "
        "costs, which a group pays once for all members"
    )


def check_fits(target: Target, train: Program) -> None:
    """Raises the one-line ValueError of a train step that does not fit one chip's memory."""
    needed = needed_bytes(train)
    chip = target.topology.chip
    if train.compiled and needed <= chip.hbm_bytes:
        return
    if needed is None:
        raise ValueError(
            f"the train step does not compile for {target.topology.name}: {train.error}"
        )
    raise ValueError(
        f"the train step at data.batch_size={target.batch_size} needs {gib(needed)} GiB per "
        f"chip, more than {target.topology.name}'s {gib(chip.hbm_bytes)} GiB ({chip.name}); "
        "use --fit to find the largest batch that fits, train.grad_accum_steps, train.fsdp, "
        "model.remat or a larger slice"
    )


def fit_line(target: Target, fit: Fit) -> str:
    chip = target.topology.chip
    if not fit.batch_size:
        return f"fit: no batch fits (tried down to {fit.unit}; {fit.compiles} compiles)"
    time_text, rate_text = step_range(target, fit.program)
    line = (
        f"fit: largest global batch that fits {fit.batch_size} "
        f"({fit.batch_size // target.topology.num_chips} per chip): "
        f"{gib(fit.program.total_bytes)} of {gib(chip.hbm_bytes)} GiB, roofline estimate "
        f"{time_text}, {rate_text}"
    )
    if not fit.too_big:
        return line + f" (the largest tried; {fit.compiles} compiles)"
    over = needed_bytes(fit.too_big_program)
    over_text = f"needs {gib(over)} GiB" if over is not None else "does not compile"
    precision = "" if fit.exact else f"; not searched further after {fit.compiles} compiles"
    return line + f"; {fit.too_big} {over_text}{precision}"
