"""`--print_config`: every field of a config with its value, type and one-line doc.

The docs are the comments the fields are declared with (CONTRIBUTING: every field commented):
the typed configs' dataclass fields (`steps: int = 2000  # optimizer updates ...`), the data
fields of data/registry.py (`c.num_train = 100_000  # training examples ...`) and the seed of
defaults.py, read from their source, so that the listing cannot drift from the declarations.
"""

import dataclasses
import inspect
import re
from collections.abc import Mapping

# `name: type = value  # doc` (a dataclass field) or `c.name = value  # doc` (a data field).
_FIELD_LINE = re.compile(r"^\s*(?:c\.|config\.)?(\w+)\s*(?::[^=]+)?=.*?#\s*(.+)$")
_COMMENT_LINE = re.compile(r"^\s*#\s*(.+)$")


def source_docs(source: str, *, last: bool = False) -> dict[str, str]:
    """Field name -> its doc in `source`: the comment ending its line, else the first line of
    the comment block just above it; the first declaration of a name wins (`last`: the last)."""
    docs: dict[str, str] = {}
    above: list[str] = []
    for line in source.splitlines():
        if comment := _COMMENT_LINE.match(line):
            above.append(comment.group(1).strip())
            continue
        name = re.match(r"^\s*(?:c\.|config\.)?(\w+)\s*(?::[^=]+)?=", line)
        trailing = _FIELD_LINE.match(line)
        if name and (last or name.group(1) not in docs):
            doc = trailing.group(2).strip() if trailing else (above[0] if above else "")
            if doc:
                docs[name.group(1)] = doc
        above = []
    return docs


def _class_docs(cls, prefix: str, out: dict[str, str]) -> None:
    """Docs of a typed config's fields and of its sub-configs', under `prefix`."""
    own = source_docs(inspect.getsource(cls))
    for field in dataclasses.fields(cls):
        sub = field.metadata.get("config")
        if sub is not None:
            _class_docs(sub, f"{prefix}.{field.name}", out)
        elif field.name in own:
            out[f"{prefix}.{field.name}"] = own[field.name]


def field_docs() -> dict[str, str]:
    """Dotted field (`model.norm.kind`, `data.num_train`, `seed`) -> its one-line doc."""
    from transformer_jax import defaults
    from transformer_jax.config import ModelConfig, TrainConfig
    from transformer_jax.data import registry

    docs: dict[str, str] = {}
    _class_docs(ModelConfig, "model", docs)
    _class_docs(TrainConfig, "train", docs)
    docs["model.universal.enabled"] = "switch the Universal Transformer on (model.universal.*)"
    # The last declaration: the copy, reverse and sort fields follow addition's.
    for name, doc in source_docs(inspect.getsource(registry), last=True).items():
        docs.setdefault(f"data.{name}", doc)
    if "seed" in (found := source_docs(inspect.getsource(defaults))):
        docs["seed"] = found["seed"]
    return docs


def _flat(tree: Mapping, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value and prefix + key != "train.evaluators":
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def listing(config: Mapping) -> list[str]:
    """One line per field of `config` (a ConfigDict's to_dict()): `field = value  (type)  doc`,
    in the config's order; -1 marks a value taken from the data when the run starts."""
    docs = field_docs()
    lines = []
    for name, value in _flat(config).items():
        doc = docs.get(name, "")
        if type(value) is int and value == -1:
            doc = f"{doc} (-1: from the data)" if doc else "-1: from the data"
        lines.append(
            f"{name} = {value!r}  ({type(value).__name__})" + (f"  # {doc}" if doc else "")
        )
    return lines
