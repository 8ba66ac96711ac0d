"""Ahead-of-time compilation for TPU slices: the run's programs compile with the TPU compiler,
their memory is real and below the chip's, their FLOPs are the model's, and a run that cannot
fit says so in one line."""

import functools
import subprocess
import sys

import pytest

from transformer_jax import defaults
from transformer_jax.aot import fit as fit_module
from transformer_jax.aot import report
from transformer_jax.aot.chips import TPU_CHIPS
from transformer_jax.aot.estimate import model_flops_per_token, roofline
from transformer_jax.aot.programs import (
    Program,
    attention_path,
    compile_group,
    compile_programs,
    compile_train,
    plan_run,
    unrolled,
    unrolled_model,
)
from transformer_jax.aot.report import check_fits, needed_bytes
from transformer_jax.aot.topology import get_topology, parse
from transformer_jax.train import evaluators

pytestmark = pytest.mark.usefixtures("libtpu")


def lm_config(batch_size=16, **train):
    """A decoder-only run on planned lm1b rows (nothing is read). Sized so that matrix
    multiplies dominate (d_model 128, d_ff 512, 128 tokens): the 6N + 12LTD count leaves out
    norms, softmax and the optimizer, a few percent here."""
    config = defaults.base_config("lm1b")
    config.data.update(seq_len=128, batch_size=batch_size, packing=False, spm_vocab_size=256)
    config.model.update(family="decoder_only", d_model=128, num_decoder_layers=2)
    config.model.update(dropout_rate=0.0)
    config.model.attention.num_heads = 4
    # The jax path, whose FLOPs XLA counts ("auto" is splash on one chip: a Pallas kernel, whose
    # FLOPs XLA's count leaves out; test_splash_attention_compiles_for_one_chip).
    config.model.attention.impl = "jax"
    config.model.ffn.d_ff = 512
    config.train.update(**train)
    return config


@functools.cache
def train_program(topology: str, **train) -> tuple:
    """(plan, train step) of `lm_config(**train)` on `topology`, compiled once per module."""
    plan = plan_run(lm_config(**train), get_topology(topology))
    return plan, compile_programs(plan, decode=False)[0]


# Each compile of the step costs 15-50 s on 2 CPU cores: the fast tier compiles it for one
# chip; the 8-chip slice, its fsdp and pmap layouts are the slow tier's (test_parallel.py checks
# the same layouts against one device on 8 simulated CPU devices in the fast tier).
SLICE = pytest.mark.slow


@pytest.mark.parametrize(
    "topology, train",
    [
        ("v5e:1x1", {}),
        pytest.param("v5e:2x4", {}, marks=SLICE),
        pytest.param("v5e:2x4", {"fsdp": 8}, marks=SLICE),
        pytest.param("v5e:2x4", {"parallelism": "pmap"}, marks=SLICE),
    ],
)
def test_train_step_compiles_with_real_memory_and_model_flops(topology, train):
    plan, program = train_program(topology, **train)
    assert program.compiled, program.error
    assert all(v >= 0 for v in program.memory.values())
    assert 0 < program.total_bytes < TPU_CHIPS["v5e"].hbm_bytes
    model = model_flops_per_token(plan.prepared.model_config, 128) * 16 * 128
    chips = plan.topology.num_chips
    assert program.flops * chips == pytest.approx(model, rel=0.1)


@pytest.mark.slow  # one more compile of the step
def test_splash_attention_compiles_for_one_chip():
    """ "auto" on one chip, with 128-token rows, is the splash kernel: the step holds its Pallas
    calls, and XLA's FLOPs leave out the attention matmuls the jax path's count has."""
    config = lm_config()
    config.model.attention.impl = "auto"
    plan = plan_run(config, get_topology("v5e:1x1"))
    splash = compile_programs(plan, decode=False)[0]
    assert splash.compiled, splash.error
    assert splash.pallas_kernels > 0 and attention_path(plan, splash) == "splash"
    _, jax_path = train_program("v5e:1x1")
    assert jax_path.pallas_kernels == 0 and splash.flops < jax_path.flops


def test_a_run_group_compiles_as_its_members_steps_stacked():
    """Two members as one vmapped program: twice one member's FLOPs and state, twice its
    tokens; the comparison line states the roofline of both ways."""
    plan, one = train_program("v5e:1x1")
    group = compile_group(plan, 2)
    assert group.compiled, group.error
    assert group.tokens == 2 * one.tokens
    assert group.flops == pytest.approx(2 * one.flops, rel=0.05)
    assert group.memory["arguments"] == pytest.approx(2 * one.memory["arguments"], rel=0.05)
    line = report.group_line(plan, one, group)
    assert line.startswith("run group of 2: roofline ") and "ratio" in line


@SLICE
def test_fsdp_shards_the_state_over_the_chips():
    """Parameters and optimizer state split 8 ways: the arguments shrink about 8 times."""
    (_, replicated), (_, sharded) = train_program("v5e:2x4"), train_program("v5e:2x4", fsdp=8)
    assert sharded.memory["arguments"] < replicated.memory["arguments"] / 4


@pytest.mark.slow  # two more compiles, the looped step and its unrolled count
def test_grad_accumulation_and_scanned_layers_count_the_whole_step():
    """XLA counts a loop body once; the counts come from the unrolled step instead."""
    (_, plain), (_, looped) = train_program("v5e:1x1"), train_program("v5e:1x1", grad_accum_steps=2)
    assert looped.flops == pytest.approx(plain.flops, rel=0.05)


def test_a_universal_transformers_steps_are_counted_unrolled():
    """The UT's steps are a loop, whose body XLA counts once: its counts come from the
    unrolled equivalent (same batch), and a model without loops compiles once."""
    config = lm_config()
    config.model.universal.enabled = True
    plan = plan_run(config, get_topology("v5e:1x1"))
    model, step = unrolled_model(plan), unrolled(plan)
    assert model.prepared.model_config.universal.unroll and model.batch_size == plan.batch_size
    assert step.prepared.model_config.universal.unroll
    plain = plan_run(lm_config(), get_topology("v5e:1x1"))
    assert unrolled_model(plain) is None and unrolled(plain) is None


@pytest.mark.slow  # three more compiles: the looped UT step, its unrolled count, the eval's
def test_a_universal_transformer_step_counts_every_step():
    """A 2-step UT does the FLOPs of the 2-layer model (one block applied twice, plus the step
    signals): counted unrolled, not one step's."""
    config = lm_config()
    config.model.universal.enabled = True  # steps 0: the stack's 2 layers
    plan = plan_run(config, get_topology("v5e:1x1"))
    looped = compile_train(plan)
    train, _ = compile_programs(plan, decode=False)
    _, plain = train_program("v5e:1x1")
    assert looped.flops < 0.75 * plain.flops  # one step's block: what the loop shows XLA
    assert train.flops == pytest.approx(plain.flops, rel=0.05)


def tiny_translation():
    config = defaults.base_config("multi30k")
    config.data.update(batch_size=8, spm_vocab_size=64, max_input_len=12, max_target_len=13)
    config.data.update(eval_max_len=16, length_buckets=(8,))  # each bucket below 13
    config.model.update(d_model=32, num_encoder_layers=1, num_decoder_layers=1)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 64
    config.train.evaluators.generation.enabled = True
    config.train.evaluators.bleu.enabled = True
    return config


@SLICE
@pytest.mark.parametrize("parallelism", ["jit", "pmap"])
def test_evaluators_decodings_compile_on_a_slice_as_the_run_places_them(parallelism):
    """Generation accuracy's batch split over the 8 chips (or one chip under pmap), BLEU's
    host inputs replicated: each program compiles with the run's placement."""
    config = tiny_translation()
    config.train.parallelism = parallelism
    programs = compile_programs(plan_run(config, get_topology("v5e:2x4")))
    assert [p.name for p in programs][2:] == ["generation", "bleu_greedy", "bleu_beam"]
    assert all(p.compiled for p in programs), [p.error for p in programs]


def test_encoder_decoder_compiles_train_eval_and_its_evaluators_decodings():
    """The programs are the evaluators' own: generation accuracy's greedy decoding of eval
    batches, BLEU's greedy and beam decoding of the test sources."""
    config = tiny_translation()
    target = plan_run(config, get_topology("v5e:1x1"))
    programs = compile_programs(target)
    names = ["train", "eval", "generation", "bleu_greedy", "bleu_beam"]
    assert [p.name for p in programs] == names
    assert all(p.compiled for p in programs), [p.error for p in programs]
    assert "attention splash (model.attention.impl for tpu)" in report.header(target, "x")[1]
    # Rows of 12 and 13 tokens: no splash block divides them, the layers took the jax path.
    assert attention_path(target, programs[0]) == "jax (lengths splash cannot tile)"
    assert "attention jax (lengths splash" in report.header(target, "x", programs[0])[1]
    train_line = report.program_line(target, programs[0])
    assert "XLA" in train_line and "analytic HBM traffic" in train_line
    assert "XLA's bytes and the analytic count" in train_line and "not measurements" in train_line
    greedy, beam = programs[3:]
    assert beam.total_bytes > greedy.total_bytes  # four hypotheses per example
    assert greedy.tokens == 8 * 16  # the test split's target length, every row
    config.train.evaluators.generation.enabled = False  # no evaluator decodes: nothing more
    config.train.evaluators.bleu.enabled = False
    assert evaluators.programs(plan_run(config, get_topology("v5e:1x1")).prepared) == {}


def test_bad_topology_and_batch_are_value_errors_before_compiling():
    with pytest.raises(ValueError, match="v5e:1x1"):
        parse("v9:2x2")
    with pytest.raises(ValueError, match="2-D"):
        parse("v5e:2x2x1")
    with pytest.raises(ValueError, match="data.batch_size=12"):
        plan_run(lm_config(batch_size=12), get_topology("v5e:2x4"))


def test_not_fitting_names_the_figure():
    chip = TPU_CHIPS["v5e"]
    plan = type("P", (), {"topology": get_topology("v5e:1x1"), "batch_size": 64})
    oom = Program("train", error="RESOURCE_EXHAUSTED: Ran out of memory. Used 45.5G of 15.75G hbm")
    assert needed_bytes(oom) == 45.5 * 2**30
    temporaries = "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
    temporaries += "HLO temporaries (887.25G) exceeds available HBM (15.75G)."
    assert needed_bytes(Program("train", error=temporaries)) == 887.25 * 2**30
    with pytest.raises(ValueError, match=r"needs 45\.50 GiB per chip, more than .* 16\.00 GiB"):
        check_fits(plan, oom)
    too_big = Program(
        "train",
        memory=dict.fromkeys(("arguments", "outputs", "aliased", "temporaries", "code"), 0)
        | {"temporaries": 2 * chip.hbm_bytes},
    )
    with pytest.raises(ValueError, match=r"needs 32\.00 GiB"):
        check_fits(plan, too_big)


def fake_compiles(monkeypatch, bytes_per_chip):
    """compile_train replaced by a program of `bytes_per_chip(global batch)` bytes per chip,
    with XLA:TPU's out-of-memory message above 16 GiB (v5e); -> the list of batches compiled."""
    compiled = []

    def fake_compile(candidate):
        compiled.append(candidate.batch_size)
        needed = bytes_per_chip(candidate.batch_size)
        if needed > 16 * 2**30:
            return Program(
                "train", error=f"Ran out of memory. Used {needed / 2**30:.3f}G of 15.75G hbm"
            )
        memory = {"arguments": 0, "outputs": 0, "aliased": 0, "code": 0}
        return Program("train", memory={**memory, "temporaries": needed})

    monkeypatch.setattr(fit_module, "compile_train", fake_compile)
    return compiled


def test_fit_finds_the_largest_fitting_batch(monkeypatch):
    """With memory linear in the batch (1 GiB per row on a 16 GiB chip, 8 chips), the largest
    global batch that fits is 16 rows per chip."""
    plan = plan_run(lm_config(batch_size=8), get_topology("v5e:2x4"))
    fake_compiles(monkeypatch, lambda batch: batch // 8 * 2**30)
    found = fit_module.fit_batch(plan, max_compiles=20)
    assert (found.batch_size, found.too_big, found.exact) == (128, 136, True)


@pytest.mark.parametrize(
    "bytes_per_chip, most_compiles",
    [
        (lambda batch: 3 * 2**30 + batch * 2**20, 4),  # linear: 13,312, 832 times the batch
        (lambda batch: 2**30 * batch**0.5, 8),  # concave (256): the lines fall short
        (lambda batch: 2**30 + batch**2 * 2**14, 13),  # convex (991): doubling and bisecting
        # alone would take 16 compiles
    ],
)
def test_fit_is_exact_in_few_compiles_however_memory_grows(
    monkeypatch, bytes_per_chip, most_compiles
):
    """The search lands on the largest batch that fits (checked against every batch), within a
    few compiles: a line through two probes aims the next, bisection where it keeps missing."""
    plan = plan_run(lm_config(batch_size=16), get_topology("v5e:1x1"))
    compiled = fake_compiles(monkeypatch, bytes_per_chip)
    found = fit_module.fit_batch(plan, max_compiles=20)
    largest = max(b for b in range(1, 2**15) if bytes_per_chip(b) <= 16 * 2**30)
    assert (found.batch_size, found.too_big, found.exact) == (largest, largest + 1, True)
    assert len(compiled) == found.compiles <= most_compiles
    assert len(set(compiled)) == len(compiled)  # no batch compiled twice


def test_fit_uses_the_compiled_shipped_step_and_says_when_nothing_fits(monkeypatch):
    plan = plan_run(lm_config(batch_size=8), get_topology("v5e:2x4"))
    compiled = fake_compiles(monkeypatch, lambda batch: 20 * 2**30)
    shipped = Program("train", error="Ran out of memory. Used 20G of 15.75G hbm")
    found = fit_module.fit_batch(plan, max_compiles=20, known=shipped)
    assert (found.batch_size, found.too_big, found.compiles) == (0, 8, 1)
    assert compiled == []  # the shipped batch (one row per chip) was the only one to try


def test_fit_without_compiles_still_reports_the_shipped_step_that_fits(monkeypatch):
    """--fit_compiles=0: the shipped step, compiled already, is the one batch known to fit."""
    plan = plan_run(lm_config(batch_size=8), get_topology("v5e:2x4"))
    compiled = fake_compiles(monkeypatch, lambda batch: 2**30)
    memory = {"arguments": 0, "outputs": 0, "aliased": 0, "code": 0, "temporaries": 2**30}
    shipped = Program("train", memory=memory)
    found = fit_module.fit_batch(plan, max_compiles=0, known=shipped)
    assert (found.batch_size, found.program, found.too_big, compiled) == (8, shipped, 0, [])


def test_roofline_is_the_slower_of_compute_and_memory():
    chip = TPU_CHIPS["v5e"]
    compute = roofline(2 * chip.peak_flops, chip.hbm_bandwidth, chip, tokens=100)
    assert (compute.seconds, compute.bound, compute.tokens_per_s) == (2.0, "compute", 50.0)
    memory = roofline(chip.peak_flops, 3 * chip.hbm_bandwidth, chip, tokens=3, model_flops=0.0)
    assert (memory.seconds, memory.bound, memory.mfu_bound) == (3.0, "memory", 0.0)


def run_aot(*args):
    return subprocess.run(
        [sys.executable, "-m", "transformer_jax.aot", *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.slow  # several TPU compiles: minutes on 2 CPU cores
def test_gpt2_small_at_a_huge_batch_does_not_fit_colab_in_one_line():
    # Scanned layers keep the compile short; the step's memory is the same program's.
    result = run_aot(
        "--config=benchmarks/speed_configs.py:gpt2_small",
        "--config.batch_size=512",
        "--config.model.scan_layers=True",
        "--topology=v5e:1x1",
        "--nodecode",
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and lines[0].startswith("aot: error: ")
    assert "GiB per chip, more than v5e:1x1's 16.00 GiB" in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_unknown_topology_is_one_line_and_exit_2():
    result = run_aot("--config=benchmarks/speed_configs.py:small", "--topology=v5e-8")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("aot: error: --topology='v5e-8'")
    assert "Traceback" not in result.stderr


def test_a_sweep_variant_is_the_config_the_sweep_starts_for_it():
    path = "experiments/universal_table4_t2t_buckets.py"
    name, config = report.sweep_variant(path, "ut_act")
    assert name.startswith(f"{path} (variant 'ut_act'")
    assert config.model.universal.act and config.model.universal.halting_input == "step_input"
    assert config.data.bucket_by_length == "t2t"
    _, baseline = report.sweep_variant(path)  # the sweep's baseline: the Transformer
    assert not baseline.model.universal.enabled and baseline.data.bucket_by_length == "t2t"
    with pytest.raises(
        ValueError, match="--variant=ut is not a variant of .*; its variants: transformer, ut_act"
    ):
        report.sweep_variant(path, "ut")
    result = run_aot("--config=configs/algorithmic.py:copy", "--variant=ut_act")
    assert result.returncode == 2
    assert "aot: error: --variant=ut_act needs --sweep=<sweep file>" in result.stderr
