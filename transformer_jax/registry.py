"""`Registry`: the one place that maps a config string to its implementation, per kind.

    NORMS = Registry("model.norm.kind")

    @NORMS.register("rmsnorm")
    def _rmsnorm(config, name): ...

    NORMS["rmsnorm"]          # the entry; an unknown name raises, listing the valid ones
    NORMS.names()             # the valid names, which the typed configs check against

Adding an option (a norm, a positional encoding, an activation, a model family) is one
registered entry next to its implementation; the config accepts it from then on.
"""

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, field: str):
        self.field = field  # the config field whose values name the entries
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(entry: T) -> T:
            self.add(name, entry)
            return entry

        return add

    def add(self, name: str, entry: T) -> None:
        if name in self._entries:
            raise ValueError(f"{self.field}={name!r} is registered twice")
        self._entries[name] = entry

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            raise ValueError(f"{self.field}={name!r} is not valid; choose one of {self.names()}")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)
