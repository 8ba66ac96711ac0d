"""Training iterators with a hook, for tests that need an event (a signal, a kill, a full disk,
a NaN) at a fixed batch rather than at a time: it lands mid-run at any machine speed.

`on_batch(fetched, batch) -> batch` runs on each batch as it is fetched (`fetched` counts from
1 per iterator; a seed group has one iterator per seed) and returns the batch to train on.
A subprocess script puts tests/ on sys.path and calls `run_main(on_batch)`.
"""

from transformer_jax.data.api import Dataset


class HookedIterator:
    """A training iterator passing each batch through `on_batch`; checkpoints save and restore
    the wrapped iterator's state."""

    def __init__(self, iterator, on_batch):
        self.iterator, self.on_batch, self.fetched = iterator, on_batch, 0

    def __next__(self):
        batch = next(self.iterator)
        self.fetched += 1
        return self.on_batch(self.fetched, batch)

    def get_state(self):
        return self.iterator.get_state()

    def set_state(self, state):
        self.iterator.set_state(state)


def hook_train_iterators(on_batch) -> None:
    """Every training iterator this process makes from now on is hooked with `on_batch`."""
    original = Dataset.train_iterator
    Dataset.train_iterator = lambda self, **kw: HookedIterator(original(self, **kw), on_batch)


def hook_next_run(monkeypatch, on_batch) -> None:
    """The next training iterator this process makes (the next solo run's) is hooked with
    `on_batch`; later ones are not."""
    original = Dataset.train_iterator

    def train_iterator(self, **kwargs):
        monkeypatch.setattr(Dataset, "train_iterator", original)  # This run only.
        return HookedIterator(original(self, **kwargs), on_batch)

    monkeypatch.setattr(Dataset, "train_iterator", train_iterator)


def run_main(on_batch) -> None:
    """transformer_jax.main on sys.argv, its training iterators hooked with `on_batch`."""
    from absl import app

    import transformer_jax.main as main_module

    hook_train_iterators(on_batch)
    app.run(main_module.main)
