"""Issue 19: the imports of the code against docs/architecture.md's "Layout and boundaries" table.

Every ``.py`` file of the app packages is read with ``ast`` (nothing is imported; see tests/support/imports.py):
absolute imports, relative ones resolved, and imports inside functions. A lazy import counts like any other: it
only delays the dependency, so ``segmenters`` importing Django in a function would still tie it to the web app.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from tests.support.imports import ImportRef, tree_imports

ROOT = Path(__file__).resolve().parent.parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: The "may import" column of docs/architecture.md's "Layout and boundaries" table: the project modules each
#: app package may import (a module, or a package and everything under it); its own modules always. The table
#: writes them in backticks and test_the_table_states_these_rules keeps the two equal: change them together.
MAY_IMPORT: dict[str, set[str]] = {
    "config": {"tasks", "segmenters"},
    "collector": {
        "segmenters",
        "benchmark",
        "tasks.names",
        "config.celery",
        "config.ports",
        "config.environment",
        "config.api_errors",
        "config.json_bodies",
    },
    "annotation_ui": {
        "collector.services",
        "collector.selectors",
        "collector.models",
        "collector.platforms",
        "config.api_errors",
        "config.json_bodies",
    },
    "evaluation": {
        "collector.models",
        "collector.selectors.datasets",
        "collector.services.outbox",
        "collector.researcher.access",
        "collector.api.permissions",
        "benchmark",
        "segmenters",
        "tasks.names",
        "config.api_errors",
        "config.json_bodies",
    },
    "tasks": {"collector", "evaluation", "benchmark"},
    "segmenters": set(),
    "exports": {
        "collector.admin",
        "collector.models",
        "collector.selectors",
        "collector.services.corrective",
        "collector.services.corrective_simulation",
        "collector.services.masks",
        "benchmark",
    },
    "benchmark": {"segmenters"},
}
#: Folders of the table that hold no app code.
NOT_APP_CODE = {"static", "templates", "tests", "bench"}
#: Libraries a researcher uses without the web app: besides the rules above, never the web stack.
LIBRARIES = ("segmenters", "benchmark")
WEB_STACK = {"django", "rest_framework", "drf_spectacular", "whitenoise"}


def _allowed(module: str, rules: set[str]) -> bool:
    return any(module == rule or module.startswith(f"{rule}.") for rule in rules)


@cache
def _imports(package: str) -> tuple[ImportRef, ...]:
    return tuple(tree_imports(package, root=ROOT))


def _project_imports(package: str) -> list[ImportRef]:
    return [ref for ref in _imports(package) if ref.top in MAY_IMPORT and ref.top != package]


def _table_rows() -> list[list[str]]:
    text = ARCHITECTURE.read_text()
    table = text[text.index("| folder | what lives there | may import |") :].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_every_import_follows_the_table():
    broken = []
    for package, rules in MAY_IMPORT.items():
        refs = [str(ref) for ref in _project_imports(package) if not _allowed(ref.module, rules)]
        if refs:
            allowed = ", ".join(sorted(rules)) or "no other project package"
            broken.append(f"{package}/ may import {allowed}; but\n    " + "\n    ".join(refs))
    assert not broken, (
        "imports docs/architecture.md's 'may import' column does not allow:\n  " + "\n  ".join(broken) + "\n"
        "Move the code to a module the importer may use or, if the rule is what is wrong, change the table's "
        "cell and MAY_IMPORT in tests/config/test_layers.py together."
    )


def test_the_libraries_never_import_django_or_the_web_app():
    broken = [
        str(ref)
        for library in LIBRARIES
        for ref in _imports(library)
        if ref.top in WEB_STACK or (ref.top in MAY_IMPORT and ref.top not in LIBRARIES)
    ]
    assert not broken, (
        f"{'/, '.join(LIBRARIES)}/ are used without the web app, so they never import Django or its "
        "packages, not even in a function:\n  " + "\n  ".join(broken)
    )


def test_every_rule_is_used():
    # the table says what the code does: a permission nothing uses is a boundary nobody looked at
    unused = [
        f"{package}/ -> {rule}"
        for package, rules in MAY_IMPORT.items()
        for rule in sorted(rules)
        if not any(_allowed(ref.module, {rule}) for ref in _project_imports(package))
    ]
    assert not unused, (
        f"MAY_IMPORT allows imports no file makes: {unused}. Drop them from the table's 'may import' "
        "cell and from MAY_IMPORT."
    )


def test_the_table_states_these_rules():
    folders = {}
    for folder_cell, _, may_import in _table_rows():
        for folder in re.findall(r"`([a-z_]+)/`", folder_cell):
            modules = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)*)`", may_import))
            folders[folder] = {module for module in modules if module.split(".")[0] in MAY_IMPORT}
    assert set(folders) == set(MAY_IMPORT) | NOT_APP_CODE, (
        f"docs/architecture.md's table has the folders {sorted(folders)}; MAY_IMPORT has {sorted(MAY_IMPORT)} "
        f"and NOT_APP_CODE {sorted(NOT_APP_CODE)}: add the new folder's rule to both."
    )
    for package, rules in MAY_IMPORT.items():
        assert folders[package] == rules, (
            f"docs/architecture.md says {package}/ may import {sorted(folders[package])} (the modules in "
            f"backticks of its 'may import' cell), MAY_IMPORT says {sorted(rules)}: make them agree."
        )


def test_every_top_level_package_has_a_rule():
    packages = {
        path.parent.name for path in ROOT.glob("*/__init__.py") if not path.parent.name.startswith(".")
    }
    missing = sorted(packages - set(MAY_IMPORT) - NOT_APP_CODE)
    assert not missing, (
        f"{missing} have no row in docs/architecture.md's 'Layout and boundaries' table: add one, with what "
        "it may import, and its rule to MAY_IMPORT in tests/config/test_layers.py."
    )


def import_matrix() -> dict[str, dict[str, int]]:
    """package -> {imported project package: names imported from it}: what the code does, for the table."""
    matrix = {}
    for package in MAY_IMPORT:
        counts: dict[str, int] = {}
        for ref in _project_imports(package):
            counts[ref.top] = counts.get(ref.top, 0) + 1
        matrix[package] = dict(sorted(counts.items()))
    return matrix


if __name__ == "__main__":  # python -m tests.config.test_layers
    for package, imported in import_matrix().items():
        print(f"{package:14} -> {', '.join(f'{name} ({count})' for name, count in imported.items()) or '-'}")
