"""The services of collector/services import each other without a cycle (issue 35 item 3): a cycle means two
modules that can only change together and an import order that works by the accident of where a function-level
import sits. The graph is read from the source (ast), imports inside functions included, so a cycle hidden
in a function body is found too."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "collector" / "services"
PACKAGE = "collector.services"


def services_import_graph(folder: Path = SERVICES, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module name (``sessions``) -> the sibling services it imports anywhere in its source (top level or
    inside a function), by ``import collector.services.x``, ``from collector.services.x import ...``,
    ``from collector.services import x`` or a relative ``from .x import ...``."""
    modules = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in sorted(modules):
        tree = ast.parse((folder / f"{name}.py").read_text(), filename=str(folder / f"{name}.py"))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets |= {_sibling(alias.name, package) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level > 1:  # above the package: not a sibling
                    continue
                if node.level == 1:
                    base = f"{package}.{node.module}" if node.module else package
                else:
                    base = node.module or ""
                if base == package:
                    targets |= {alias.name for alias in node.names}
                else:
                    targets.add(_sibling(base, package))
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def _sibling(dotted: str, package: str) -> str:
    prefix = f"{package}."
    return dotted[len(prefix) :].split(".", 1)[0] if dotted.startswith(prefix) else ""


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """For every module that reaches itself through imports, the shortest such cycle as a closed path (the
    first module repeated at the end), each cycle once whichever module it was found from; [] when the
    graph is acyclic."""
    cycles: list[list[str]] = []
    for start in sorted(graph):
        cycle = _shortest_cycle(start, graph)
        if cycle and not any(_same_cycle(cycle, known) for known in cycles):
            cycles.append(cycle)
    return cycles


def _shortest_cycle(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A shortest closed path from ``start`` back to it (breadth-first), or None."""
    paths = {target: [start, target] for target in sorted(graph[start])}
    frontier = list(paths)
    while frontier and start not in paths:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, ())):
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    return paths.get(start)


def _same_cycle(one: list[str], other: list[str]) -> bool:
    """Whether two closed paths are the same cycle started at different modules."""
    a, b = one[:-1], other[:-1]
    return len(a) == len(b) and any(b[i:] + b[:i] == a for i in range(len(b)))


def test_the_services_import_each_other_without_a_cycle():
    graph = services_import_graph()
    assert {"sessions", "qualification", "corrective", "validation"} <= set(graph), sorted(graph)
    cycles = import_cycles(graph)
    assert not cycles, (
        "import cycles among collector/services (imports inside functions count): "
        + "; ".join(" -> ".join(cycle) for cycle in cycles)
    )


def test_a_cycle_is_found_and_named_even_through_a_function_level_import(tmp_path):
    """The finder on a package of its own: ``a`` imports ``b`` at the top, ``b`` imports ``c`` inside a
    function and ``c`` imports ``a`` the relative way; ``d`` only imports ``a``."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import thing\n")
    (package / "b.py").write_text("def thing():\n    from pkg import c\n    return c\n")
    (package / "c.py").write_text("import os\nfrom .a import thing\n")
    (package / "d.py").write_text("import pkg.a\n")
    graph = services_import_graph(package, "pkg")
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]
    (package / "b.py").write_text("def thing():\n    return None\n")
    assert import_cycles(services_import_graph(package, "pkg")) == []
