"""The package's import graph has no cycle: lower floors (registry, fields, run_dir, sweep_dir,
layers) never import upper ones (config, models, train, sweep, report).

Every import counts, module-level or inside a function (a function-local import that dodges a
cycle still makes one), as does `importlib.import_module("transformer_jax...")` or
`runpy.run_module(...)`. Importing `a.b.c` also runs the `__init__` of every package on the way
(`a.b`), so that is an edge too, unless the importer sits inside that package already (its
`__init__` ran first).
"""

import ast
import pathlib
import subprocess
import sys

import pytest

import transformer_jax

PACKAGE_DIR = pathlib.Path(transformer_jax.__file__).parent


def module_files(package_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py file of the package (packages by __init__)."""
    root = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported_names(tree: ast.AST, module: str, is_package: bool):
    """(line, dotted name) of everything the module imports, anywhere in its body. A name may
    be a module or an attribute of one (`from a import f`): the caller resolves it."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield node.lineno, source
            for alias in node.names:
                yield node.lineno, f"{source}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "run_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def import_graph(package_dir: pathlib.Path) -> dict[str, dict[str, int]]:
    """module -> {imported module of the package: line of the first import}."""
    modules = module_files(package_dir)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        tree = ast.parse(path.read_text(), str(path))
        for line, name in _imported_names(tree, module, path.name == "__init__.py"):
            target = name
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if not target:
                continue  # outside the package
            # The module itself and the __init__ of every package on the way to it.
            parts = target.split(".")
            for depth in range(1, len(parts) + 1):
                step = ".".join(parts[:depth])
                inside = module == step or module.startswith(step + ".")
                if step != module and not inside:
                    edges.setdefault(step, line)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle as [m0, m1, ..., m0], or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, {})):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return "\n".join(
        f"  {a} (line {graph[a][b]}) imports {b}" for a, b in zip(cycle, cycle[1:], strict=False)
    )


def test_the_package_has_no_import_cycle():
    graph = import_graph(PACKAGE_DIR)
    assert len(graph) > 50 and "transformer_jax.config.model" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle:\n" + describe(cycle, graph)


def test_the_floors_stand_where_the_docs_say():
    """Configs read registries, layers and models read configs; run-directory and sweep.json
    I/O sits below both the sweep and the report, and the sweep does not write the report."""
    graph = import_graph(PACKAGE_DIR)

    def imports(module: str, prefix: str) -> list[str]:
        return [t for t in graph[module] if t == prefix or t.startswith(prefix + ".")]

    for layer in ("attention", "positional", "norms", "feedforward"):
        assert not imports(f"transformer_jax.layers.{layer}", "transformer_jax.config")
    assert "transformer_jax.config.model" in graph_reach(graph, "transformer_jax.models.stack")
    for module in ("transformer_jax.sweep_dir", "transformer_jax.environment"):
        for upper in ("transformer_jax.sweep", "transformer_jax.report"):
            assert not imports(module, upper), (module, upper)
    sweep_reach = graph_reach(graph, "transformer_jax.sweep")  # the package, runner included
    assert "transformer_jax.sweep.runner" in sweep_reach
    assert not [m for m in sweep_reach if m.startswith("transformer_jax.report")]
    # No module of the sweep package, its `python -m` entry included, imports the report (which
    # reads the sweep's definitions): the command that writes both sits above the two packages.
    sweep_modules = [m for m in graph if m.startswith("transformer_jax.sweep.")]
    assert "transformer_jax.sweep.__main__" in sweep_modules
    for module in sweep_modules:
        assert not imports(module, "transformer_jax.report"), module
    assert imports("transformer_jax.sweep_cli", "transformer_jax.report")


def graph_reach(graph: dict[str, dict[str, int]], start: str) -> set[str]:
    """Every module importing `start` (transitively) runs."""
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_sweep_command_starts_without_jax():
    """The sweep command, its report and its job launchers import neither JAX nor the datasets
    (seconds of start-up for every command and every job): they come in only where a config
    file is read (sweep/hparams.py) or translations are scored (report/bleu_bootstrap.py)."""
    code = (
        "import sys, transformer_jax.sweep_cli, transformer_jax.sweep.slurm\n"
        "heavy = ('jax', 'flax', 'optax', 'orbax', 'grain', 'tensorflow', 'tensorflow_datasets')\n"
        "print(sorted(set(heavy) & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PACKAGE_DIR.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("local_import", [False, True], ids=["module-level", "function-local"])
def test_a_cycle_is_found_and_printed(tmp_path, local_import):
    """The checker itself: a cycle through a package __init__ is reported, whether the import
    back is at the top of the module or hidden in a function, and is gone once that import is."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.low import x\n")
    (package / "high.py").write_text("import pkg.sub.low\n")
    back = "def f():\n    from pkg import high\n" if local_import else "from pkg import high\n"
    (package / "sub" / "low.py").write_text(back + "x = 1\n")
    graph = import_graph(package)
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and "pkg.high" in cycle
    line = 2 if local_import else 1
    assert f"pkg.sub.low (line {line}) imports pkg.high" in describe(cycle, graph)
    (package / "sub" / "low.py").write_text("x = 1\n")
    assert find_cycle(import_graph(package)) is None
