"""The services of collector/services import each other without a cycle (issue 35 item 3): a cycle means two
modules that can only change together and an import order that works by the accident of where a function-level
import sits. The graph is read from the source (ast), imports inside functions included, so a cycle hidden
in a function body is found too. Nor does one service reach into another's private names (``_name``): what a
module shares is public, so a split module's helpers say which of them are its interface."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "collector" / "services"
PACKAGE = "collector.services"


def services_import_graph(folder: Path = SERVICES, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module name (``session_start``) -> the sibling services it imports anywhere in its source (top level or
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


def private_imports(folder: Path = SERVICES, package: str = PACKAGE) -> list[str]:
    """``module:line name`` for every private name (``_x``, not a dunder) a service takes from a sibling: by
    ``from collector.services.x import _y`` (or the relative ``from .x import _y``), or as ``x._y`` on a
    sibling module it imported (``from collector.services import x``, ``import collector.services.x as x``);
    imports inside functions included. [] when none does."""
    modules = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
    found: list[str] = []
    for name in sorted(modules):
        tree = ast.parse((folder / f"{name}.py").read_text(), filename=str(folder / f"{name}.py"))
        sibling_aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level <= 1:
                base = (f"{package}.{node.module}" if node.module else package) if node.level else node.module
                for alias in node.names:
                    if base == package and alias.name in modules:
                        sibling_aliases.add(alias.asname or alias.name)
                    elif _sibling(base or "", package) in modules and _private(alias.name):
                        found.append(f"{name}:{node.lineno} {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _sibling(alias.name, package) in modules and alias.asname:
                        sibling_aliases.add(alias.asname)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in sibling_aliases
                and _private(node.attr)
            ):
                found.append(f"{name}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_the_services_import_each_other_without_a_cycle():
    graph = services_import_graph()
    expected = {"session_start", "clicks", "session_finish", "qualification", "corrective", "validation"}
    assert expected <= set(graph), sorted(graph)
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


def test_no_service_imports_a_private_name_of_another():
    found = private_imports()
    assert not found, (
        "private names taken from a sibling service (make them public in their module, or keep them where "
        "they are used): " + "; ".join(found)
    )


def test_a_private_import_is_found_whichever_way_it_is_written(tmp_path):
    """The finder on a package of its own: ``b`` takes ``a``'s private helper by name inside a function,
    ``c`` reaches it through the module, ``d`` only uses ``a``'s public name and a dunder."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def _helper():\n    return 1\n\n\ndef helper():\n    return _helper()\n")
    (package / "b.py").write_text("def thing():\n    from pkg.a import _helper\n    return _helper()\n")
    (package / "c.py").write_text("from pkg import a\n\nvalue = a._helper()\n")
    (package / "d.py").write_text(
        "from .a import helper\nfrom pkg import a\n\nname = a.__name__ + str(helper())\n"
    )
    assert private_imports(package, "pkg") == ["b:2 _helper", "c:3 a._helper"]
    (package / "b.py").write_text("def thing():\n    from pkg.a import helper\n    return helper()\n")
    (package / "c.py").write_text("from pkg import a\n\nvalue = a.helper()\n")
    assert private_imports(package, "pkg") == []
