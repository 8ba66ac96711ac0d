"""What `python -m transformer_jax.aot` prints: per program, memory against the chip, XLA's
counts and the roofline estimate; and the one error line of a run that does not fit."""

import ml_collections
from ml_collections.config_flags import config_path

from transformer_jax import defaults
from transformer_jax.aot.chips import GIB
from transformer_jax.aot.estimate import Estimate, model_flops_per_token, roofline
from transformer_jax.aot.fit import Fit
from transformer_jax.aot.programs import Plan, Program, needed_bytes
from transformer_jax.aot.shapes import split_lengths
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


def sweep_baseline(path: str) -> tuple[str, ml_collections.ConfigDict]:
    """(its name, the config) of a sweep file's baseline run, as the sweep would start it."""
    sweep = load_sweep(path)
    config = defaults.from_file(sweep.config, sweep.config_arg or None)
    for key, value in sweep.variants[sweep.baseline].items():
        config_path.set_value(key, config, value)
    return f"{path} (variant {sweep.baseline!r}: {sweep.config_spec})", config


def gib(n: float) -> str:
    return f"{n / GIB:,.2f}"


def header(plan: Plan, path: str) -> list[str]:
    chip, topology = plan.topology.chip, plan.topology
    cfg, train = plan.model_config, plan.train_cfg
    layout = (
        "pmap (jax.pmap over the slice's devices)"
        if plan.parallel.kind == "pmap"
        else f"jit, train.fsdp={train.fsdp}"
    )
    return [
        f"{path} on {topology.name}: {topology.num_chips} x {topology.devices[0].device_kind} "
        f"({chip.name}: {chip.peak_flops / 1e12:,.3g} TFLOP/s, {gib(chip.hbm_bytes)} GiB "
        f"HBM, {chip.hbm_bandwidth / 1e9:,.4g} GB/s per chip; {chip.source})",
        f"{cfg.family}, {cfg.dtype}, scan_layers={cfg.scan_layers}, remat={cfg.remat}; "
        f"batch {plan.batch_size} ({plan.batch_size // topology.num_chips} per chip), "
        f"grad_accum_steps={train.grad_accum_steps}; {layout}",
    ]


def model_flops(plan: Plan, program: Program) -> float | None:
    """6 N + 12 L T D per token, per chip, for a decoder-only train step; else None."""
    if program.name != "train" or plan.model_config.family != "decoder_only":
        return None
    seq_len = split_lengths(plan.info, "train")[1]
    per_token = model_flops_per_token(plan.model_config, seq_len)
    return per_token * program.tokens / plan.topology.num_chips


def estimate(plan: Plan, program: Program) -> Estimate:
    return roofline(
        program.flops,
        program.bytes_accessed,
        plan.topology.chip,
        tokens=program.tokens,
        model_flops=model_flops(plan, program),
    )


def unit(plan: Plan) -> str:
    return "images" if family_of(plan.model_config).classifier else "tokens"


def program_line(plan: Plan, program: Program) -> str:
    if not program.compiled:
        return f"{program.name}: not compiled: {program.error}"
    m, chip = program.memory, plan.topology.chip
    line = (
        f"{program.name}: compiled; HBM {gib(program.total_bytes)} of {gib(chip.hbm_bytes)} "
        f"GiB per chip (arguments {gib(m['arguments'])}, outputs {gib(m['outputs'])}, aliased "
        f"{gib(m['aliased'])}, temporaries {gib(m['temporaries'])}, code {gib(m['code'])}); "
        f"XLA {program.flops / 1e12:,.4f} TFLOP and {program.bytes_accessed / 1e9:,.3f} GB "
        "accessed per chip"
    )
    if program.loops:
        return line + " (its decoding loop counted once: no time estimate)"
    if not program.flops:
        return line + " (no counts: no time estimate)"
    e = estimate(plan, program)
    mfu = "MFU" if model_flops(plan, program) is not None else "XLA-FLOPs utilisation"
    return line + (
        f"; roofline {e.seconds * 1e3:,.2f} ms ({e.bound}-bound), "
        f"{e.tokens_per_s:,.0f} {unit(plan)}/s, {mfu} bound {e.mfu_bound:.0%}"
    )


def check_fits(plan: Plan, train: Program) -> None:
    """Raises the one-line ValueError of a train step that does not fit one chip's memory."""
    needed = needed_bytes(train)
    chip = plan.topology.chip
    if train.compiled and needed <= chip.hbm_bytes:
        return
    if needed is None:
        raise ValueError(f"the train step does not compile for {plan.topology.name}: {train.error}")
    raise ValueError(
        f"the train step at data.batch_size={plan.batch_size} needs {gib(needed)} GiB per chip, "
        f"more than {plan.topology.name}'s {gib(chip.hbm_bytes)} GiB ({chip.name}); use --fit "
        "to find the largest batch that fits, train.grad_accum_steps, train.fsdp, model.remat "
        "or a larger slice"
    )


def fit_line(plan: Plan, fit: Fit) -> str:
    chip = plan.topology.chip
    if not fit.batch_size:
        return f"fit: no batch fits (tried down to {fit.unit}; {fit.compiles} compiles)"
    e = estimate(plan, fit.program)
    line = (
        f"fit: largest global batch that fits {fit.batch_size} "
        f"({fit.batch_size // plan.topology.num_chips} per chip): "
        f"{gib(fit.program.total_bytes)} of {gib(chip.hbm_bytes)} GiB, roofline "
        f"{e.seconds * 1e3:,.2f} ms, {e.tokens_per_s:,.0f} {unit(plan)}/s"
    )
    if not fit.too_big:
        return line + f" (the largest tried; {fit.compiles} compiles)"
    over = needed_bytes(fit.too_big_program)
    over_text = f"needs {gib(over)} GiB" if over is not None else "does not compile"
    precision = "" if fit.exact else f"; not searched further after {fit.compiles} compiles"
    return line + f"; {fit.too_big} {over_text}{precision}"
