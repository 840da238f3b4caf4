"""No import cycles between the project's modules, imports inside functions and type-only
imports included: a cycle hidden behind a deferred import is still two modules that each
need the other."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("attnserve", "bench", "export", "models", "service")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if any(part.startswith(".") for part in parts):  # a virtual environment, a cache
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project's modules `path` imports anywhere in it (a `from package import name`
    counts as the module `package.name` where there is one)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules its import runs: those it imports, and the packages
    they are in (importing `a.b.c` runs `a.b`'s `__init__` first), except its own."""
    modules, graph = _modules(), {}
    for name, path in modules.items():
        edges = set()
        for imported in _imports(path, modules):
            parts = imported.split(".")
            packages = (".".join(parts[:i]) for i in range(1, len(parts)))
            edges.add(imported)
            edges.update(p for p in packages if p in modules and not name.startswith(p + "."))
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_project_imports_itself_through_others():
    """The packages' import-linter contracts hold the layers; this holds every module."""
    graph = import_graph()
    assert graph.get("service.front.server")
    assert cycles(graph) == []
