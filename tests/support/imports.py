"""Every ``import`` of a source tree, read with ``ast`` (nothing is imported), for the layer and dependency checks.

Counted: absolute imports, relative imports resolved to the absolute module they name, and imports anywhere in
a file: inside functions (a lazy import is still a dependency, only a later one) and under ``if TYPE_CHECKING``.
``from package import name`` is recorded as ``package.name``: that is the submodule when ``name`` is one, and a
name inside ``package`` otherwise, so a rule on ``package`` covers both and a rule on ``package.name`` the first.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ImportRef:
    path: Path  # the importing file, relative to the root it was read from
    line: int
    module: str  # absolute dotted name

    @property
    def top(self) -> str:
        return self.module.split(".", 1)[0]

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"


def module_of(path: Path) -> list[str]:
    """``collector/services/outbox.py`` -> ``["collector", "services", "outbox"]``; a package's ``__init__.py``
    names the package."""
    parts = list(path.with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _targets(node: ast.ImportFrom, path: Path) -> list[str]:
    if node.level:
        here = module_of(path)
        package = here if path.name == "__init__.py" else here[:-1]
        base = package[: len(package) - (node.level - 1)]
        prefix = ".".join([*base, node.module] if node.module else base)
    else:
        prefix = node.module or ""
    return [prefix if alias.name == "*" else f"{prefix}.{alias.name}" for alias in node.names]


def file_imports(path: Path, *, root: Path) -> Iterator[ImportRef]:
    relative = path.relative_to(root)
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in sorted(ast.walk(tree), key=lambda node: getattr(node, "lineno", 0)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = _targets(node, relative)
        else:
            continue
        for module in modules:
            yield ImportRef(relative, node.lineno, module)


def tree_imports(folder: str, *, root: Path, migrations: bool = True) -> Iterator[ImportRef]:
    """Every import of every ``.py`` file under ``root/folder`` (or of that one file), in path order."""
    base = root / folder
    for path in [base] if base.is_file() else sorted(base.rglob("*.py")):
        if migrations or "migrations" not in path.parts:
            yield from file_imports(path, root=root)
