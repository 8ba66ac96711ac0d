"""Translation runs (the bleu evaluator): BLEU metrics, the translations files, and a
:quick-shaped run of configs/multi30k.py on the Multi30k fixture, read back by the generate
command."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from transformer_jax import decoding, defaults
from transformer_jax.train.restore import load_run
from transformer_jax.train.trainer import train_and_evaluate

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "data" / "fixtures" / "multi30k"


def fixture_lines(stem: str, language: str) -> list[str]:
    with gzip.open(FIXTURE / f"{stem}.{language}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def quick_config(data_dir):
    """configs/multi30k.py:quick on the fixture, with a model small enough for a test."""
    config = defaults.from_file(REPO / "configs" / "multi30k.py", "quick")
    config.data.update(
        data_dir=str(data_dir),
        manual_dir=str(FIXTURE),
        spm_vocab_size=300,  # the fixture's sentences are then up to 79 tokens
        max_input_len=80,
        max_target_len=81,
        eval_max_len=96,
        length_buckets=(),
        batch_size=4,
    )
    config.model.update(d_model=32, num_encoder_layers=1, num_decoder_layers=1)
    config.model.attention.num_heads = 2
    config.model.ffn.d_ff = 64
    config.train.update(steps=20, warmup_steps=5, log_every=10, eval_every=10, checkpoint_every=10)
    config.train.evaluators.bleu.beam_size = 2
    return config


def test_bleu_needs_validation_and_test_splits(tmp_path):
    config = defaults.base_config("copy")
    config.data.update(data_dir=str(tmp_path), num_train=50, num_test=10, num_test_long=0)
    config.train.evaluators.bleu.enabled = True
    match = r"train.evaluators.bleu.enabled=True needs validation and test splits"
    with pytest.raises(ValueError, match=match):
        train_and_evaluate(config, str(tmp_path / "run"))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("quick")
    summary = train_and_evaluate(quick_config(root / "tfds"), str(root / "run"))
    return summary, root / "run"


def test_quick_shaped_run_logs_bleu_and_writes_translations(quick_run):
    summary, workdir = quick_run
    assert summary.status == "finished"
    assert "bleu_greedy" in summary.metrics["validation"]
    on_disk = json.loads((workdir / "summary.json").read_text())
    assert on_disk["extras"]["bleu"]["signatures"]["bleu"].startswith("nrefs:1|case:mixed")
    assert on_disk["extras"]["bleu"]["beam_size"] == 2 and "bleu" not in on_disk
    lines = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    validation = [m for m in lines if m["split"] == "validation"]
    assert [m["step"] for m in validation] == [10, 20]
    assert all("bleu_greedy" in m for m in validation)
    assert [m["step"] for m in lines if "bleu_beam" in m] == [20]  # test decoding at the end
    bleu_names = {f"{b}_{s}" for b in ("bleu", "bleu_lc") for s in ("beam", "greedy")}
    assert bleu_names <= set(summary.metrics["test"])
    assert all(0 <= summary.metrics["test"][name] <= 100 for name in bleu_names)
    assert on_disk["extras"]["bleu"]["translations"] == "translations/test.txt"


def test_translations_are_one_line_per_test_example_in_order(quick_run):
    _, workdir = quick_run
    out = workdir / "translations"
    read = lambda name: (out / name).read_text(encoding="utf-8").split("\n")[:-1]  # noqa: E731
    assert read("test.src.txt") == fixture_lines("test_2016_flickr", "de")
    assert read("test.ref.txt") == fixture_lines("test_2016_flickr", "en")
    assert len(read("test.txt")) == len(read("test.greedy.txt")) == 6
    # Line i is source i decoded on its own (greedy: the batch does not change a row's output).
    run = load_run(str(workdir))
    info = run.info
    greedy = decoding.DecodeConfig(max_new_tokens=info.max_target_len)
    generate = decoding.make_generate_fn(run.model, greedy, (1, info.max_input_len))
    for source, line in zip(read("test.src.txt"), read("test.greedy.txt"), strict=True):
        ids = np.zeros((1, info.max_input_len), np.int32)
        encoded = info.tokenizer.encode(source)
        ids[0, : len(encoded)] = encoded
        tokens = generate(run.variables, ids, jax.random.PRNGKey(0))
        assert info.tokenizer.decode(np.asarray(tokens[0])) == line


@pytest.mark.slow
def test_generate_prints_a_translation(quick_run):
    _, workdir = quick_run
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_jax.generate",
            f"--workdir={workdir}",
            "--input=Ein Mann fährt Fahrrad.",
            "--strategy=beam",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert "input:  Ein Mann fährt Fahrrad." in result.stdout
    assert "output: " in result.stdout
