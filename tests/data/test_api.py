"""The DataSource protocol: a dataset added as docs/adding.md says (one class, its default
fields, one DATASETS entry) serves the trainer's whole data API, and every shipped dataset
declares the protocol's methods with its signatures."""

import dataclasses
import inspect

import grain
import ml_collections
import numpy as np
import pytest

from transformer_jax.data import DATASETS, Dataset, DataSource, load_dataset
from transformer_jax.data import registry as data_registry
from transformer_jax.data.api import TextPairSource
from transformer_jax.data.batching import add_example_weights, pad, rows_to_batches, with_eos
from transformer_jax.data.checks import require_at_least
from transformer_jax.data.info import EOS_ID, NUM_SPECIAL_IDS, DatasetInfo
from transformer_jax.data.pipeline import shuffled_index_batches


def count_defaults(name: str) -> ml_collections.ConfigDict:
    del name
    c = ml_collections.ConfigDict()
    c.length = 6  # tokens counted per row (EOS follows)
    c.num_starts = 10  # rows: one per first token 3 .. 3 + num_starts - 1
    return c


class CountData:
    """Rows that count up from a first token, an "lm" dataset: the docs' example."""

    def __init__(self, cfg: ml_collections.ConfigDict):
        require_at_least("length", cfg.length, 1)
        require_at_least("num_starts", cfg.num_starts, 1)
        self._length, self._num_starts = cfg.length, cfg.num_starts
        self.info = DatasetInfo(
            name=cfg.name,
            kind="lm",
            vocab_size=NUM_SPECIAL_IDS + cfg.num_starts + cfg.length,
            max_input_len=0,
            max_target_len=cfg.length + 1,
            eval_splits=("test",),
            tokenizer=None,
        )

    def _row(self, start: int) -> dict[str, np.ndarray]:
        ids = np.arange(start, start + self._length) + NUM_SPECIAL_IDS
        targets = with_eos(ids, self.info.eos_id)
        return {"targets": pad(targets, self._length + 1, self.info.pad_id)}

    def train_dataset(self, *, seed: int, batch_size: int) -> grain.IterDataset:
        def make_batch(starts):
            return add_example_weights(
                {"targets": np.stack([self._row(s)["targets"] for s in starts])}
            )

        return shuffled_index_batches(
            self._num_starts, seed=seed, batch_size=batch_size, make_batch=make_batch
        )

    def eval_batches(self, split: str, *, batch_size: int, max_examples: int | None):
        del split  # one test split, the same rows as training
        starts = range(self._num_starts)[:max_examples]
        return rows_to_batches((self._row(s) for s in starts), batch_size)


@pytest.fixture
def count_registered(monkeypatch):
    entry = data_registry.DatasetEntry(count_defaults, CountData)
    monkeypatch.setitem(DATASETS._entries, "count", entry)


def _config(**fields) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({"name": "count", "batch_size": 4, **fields})


def test_a_registered_source_serves_the_whole_data_api(count_registered):
    dataset = load_dataset(_config())
    assert isinstance(dataset, Dataset) and dataset.info.name == "count"
    assert isinstance(dataset._source, DataSource)
    assert not isinstance(dataset._source, TextPairSource)

    # Training: seeded, and resumable at the exact next batch.
    iterator = dataset.train_iterator(seed=0, batch_size=4)
    first = next(iterator)
    assert first["targets"].shape == (4, 7) and (first["example_weights"] == 1).all()
    assert (first["targets"][:, -1] == EOS_ID).all()
    state = iterator.get_state()
    expected = [next(iterator)["targets"] for _ in range(3)]
    resumed = dataset.train_iterator(seed=0, batch_size=4)
    resumed.set_state(state)
    assert all((next(resumed)["targets"] == t).all() for t in expected)
    other = next(dataset.train_iterator(seed=1, batch_size=4))["targets"]
    assert not (other == first["targets"]).all()

    # Evaluation: every row once, the last batch filled with weight-0 rows.
    batches = dataset.eval_batches("test", batch_size=4)
    weights = np.concatenate([b["example_weights"] for b in batches])
    assert len(batches) == 3 and weights.tolist() == [1.0] * 10 + [0.0] * 2
    assert (
        sum(
            b["example_weights"].sum()
            for b in dataset.eval_batches("test", batch_size=4, max_examples=5)
        )
        == 5
    )


def test_the_registry_checks_the_new_dataset_before_building_it(count_registered):
    assert data_registry.default_data_config("count").length == 6
    with pytest.raises(ValueError, match=r"data.lenght=3 is not a field of dataset 'count'"):
        load_dataset(_config(lenght=3))
    with pytest.raises(ValueError, match=r"data.length=0 is invalid"):
        load_dataset(_config(length=0))
    dataset = load_dataset(_config())
    with pytest.raises(
        ValueError, match=r"split='valid' is invalid; valid: one of \('train', 'test'\)"
    ):
        dataset.eval_batches("valid", batch_size=4)
    with pytest.raises(ValueError, match="a translation dataset with text references"):
        dataset.text_pairs("test")


def _build_class(entry) -> type:
    """The class a registry entry builds: the entry itself, or its factory's return type."""
    if isinstance(entry.build, type):
        return entry.build
    return inspect.signature(entry.build).return_annotation


def _signature(method) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(method).parameters.values()]


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_shipped_dataset_declares_the_protocol(name):
    """Checked without building any data: the class has the protocol's methods with the same
    parameter names and kinds (keyword-only where the protocol says so)."""
    cls = _build_class(DATASETS[name])
    assert isinstance(cls, type), (name, cls)
    protocol = TextPairSource if hasattr(cls, "text_pairs") else DataSource
    for method in ("train_dataset", "eval_batches") + (
        ("text_pairs",) if protocol is TextPairSource else ()
    ):
        assert _signature(getattr(cls, method)) == _signature(getattr(protocol, method)), (
            name,
            method,
        )
    translation = name in ("multi30k", "wmt14_translate/de-en")
    assert (protocol is TextPairSource) == translation


def test_the_protocol_rejects_an_incomplete_source():
    @dataclasses.dataclass
    class NoEval:
        info: DatasetInfo

        def train_dataset(self, *, seed, batch_size):
            del seed, batch_size

    assert not isinstance(NoEval(None), DataSource)
