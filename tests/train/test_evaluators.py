"""Evaluators (train/evaluators.py): the config's blocks say which run; a new one plugs in by
registration, with no change to the loop or the run-directory contract. The new one here is
docs/adding.md's own example, read from the page, so the recipe there is the one tested."""

import json
import re
from pathlib import Path

import pytest
from train_fixtures import read_metrics, tiny_config

from transformer_jax.config import TrainConfig, eval_blocks
from transformer_jax.train import evaluators
from transformer_jax.train.trainer import train_and_evaluate

ADDING = Path(__file__).resolve().parents[2] / "docs" / "adding.md"
# The first line of the page's example evaluator: the file it goes in.
EXAMPLE_HEAD = "# transformer_jax/train/evaluators.py\n"


def example_code() -> str:
    """The code block of docs/adding.md's "Adding an evaluation" that adds an evaluator."""
    section = ADDING.read_text(encoding="utf-8").split("## Adding an evaluation", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    found = [block for block in blocks if block.startswith(EXAMPLE_HEAD)]
    assert len(found) == 1, f"docs/adding.md: one example starting {EXAMPLE_HEAD!r}"
    return found[0]


@pytest.fixture
def example_registered(monkeypatch) -> str:
    """Registers the page's example as the page says (run in train/evaluators.py's namespace,
    on a copy of its registry's entries); returns the name it registered."""
    before = evaluators.EVALUATORS.names()
    monkeypatch.setattr(evaluators.EVALUATORS, "_entries", dict(evaluators.EVALUATORS._entries))
    exec(compile(example_code(), str(ADDING), "exec"), dict(vars(evaluators)))
    added = [name for name in evaluators.EVALUATORS.names() if name not in before]
    assert len(added) == 1, added
    return added[0]


def check_registry_and_default_blocks() -> None:
    """Each default block (config/eval_blocks.py) is of a registered evaluator, in the
    registry's order, and holds the common keys and exactly its entry's options at their
    defaults; a registered evaluator without one (an opt-in one) runs only where a config gives
    it a block."""
    defaults, registered = eval_blocks.default_evaluators(), evaluators.EVALUATORS.names()
    assert list(TrainConfig().evaluators) == list(defaults)
    assert list(defaults) == [name for name in registered if name in defaults]
    for name, block in defaults.items():
        options = dict(evaluators.EVALUATORS[name].options)
        assert block == {**eval_blocks.COMMON_KEYS, **options}, name


def test_the_default_blocks_are_of_registered_evaluators_with_their_options():
    check_registry_and_default_blocks()


def test_the_check_refuses_a_default_block_that_disagrees_with_its_entry(monkeypatch):
    """The check above can fail: an option default that differs from the entry's."""
    blocks = eval_blocks.default_evaluators()
    blocks["bleu"]["beam_size"] = 5
    monkeypatch.setattr(eval_blocks, "DEFAULT_EVALUATORS", blocks)
    with pytest.raises(AssertionError):
        check_registry_and_default_blocks()


def test_the_example_of_docs_adding_registers_as_an_opt_in_evaluator(example_registered):
    """The page's example, registered as written, keeps the default blocks as they are (it has
    none: it runs only where a config names it) and is among the names a bad block is told."""
    check_registry_and_default_blocks()
    assert example_registered not in TrainConfig().evaluators
    config = TrainConfig().replace(evaluators={"perplexity": {}})
    with pytest.raises(ValueError, match=re.escape(repr(evaluators.EVALUATORS.names()))):
        evaluators.check_blocks(config)
    assert example_registered in evaluators.EVALUATORS.names()


def test_the_example_of_docs_adding_runs_where_the_config_lists_it(tmp_path, example_registered):
    """Only the evaluators with blocks run: here no decoding (no gen_seq_accuracy), and the
    page's evaluation logged at every evaluation beside the teacher-forced ones; what it
    records for the summary lands in summary.json's extras under its name."""
    name = example_registered
    config = tiny_config(tmp_path / "tfds", steps_=4, log_every=2, eval_every=2, checkpoint_every=2)
    config.train.evaluators = {"teacher_forced": {}, name: {}}
    summary = train_and_evaluate(config, str(tmp_path / "run"))
    assert summary.metrics["test"][name] == config.data.num_test
    assert "gen_seq_accuracy" not in summary.metrics["test"]
    evals = [m for m in read_metrics(tmp_path / "run") if m["split"] == "test"]
    assert [m["step"] for m in evals] == [2, 4]
    assert all(m[name] == config.data.num_test and "loss" in m for m in evals)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["extras"] == {name: {"splits": ["test", "test_long"]}}


def test_the_example_of_docs_adding_added_to_the_default_blocks_keeps_its_cadence(
    tmp_path, example_registered
):
    """As the page says: a block beside the default ones, with its own `every`."""
    name = example_registered
    config = tiny_config(tmp_path / "tfds", steps_=4, log_every=2, eval_every=2, checkpoint_every=2)
    config.train.evaluators[name] = {"every": 4}
    train_and_evaluate(config, str(tmp_path / "run"))
    evals = read_metrics(tmp_path / "run")
    assert [m["step"] for m in evals if name in m] == [4, 4]  # test and test_long, at the end
    assert any("gen_seq_accuracy" in m for m in evals)
