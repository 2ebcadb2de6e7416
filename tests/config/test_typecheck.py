"""Issue 19: the type check docs/architecture.md describes (mypy in `make lint`, ignores with reasons, the
hand-written stub of Django's choices) holds in the tree. mypy itself runs in `make lint`, not here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from django.db import models

ROOT = Path(__file__).resolve().parent.parent.parent
MYPY = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


def _lint_recipe() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    block = text[text.index("\nlint:") :].split("\n\n", 1)[0]
    return [line.strip() for line in block.splitlines()[1:] if line.startswith("\t")]


def test_make_lint_runs_mypy_after_ruff_with_the_pyproject_configuration():
    recipe = _lint_recipe()
    assert recipe[-1] == "$(VENV)/bin/mypy", recipe  # no arguments: [tool.mypy] names what it checks
    assert recipe.index("$(VENV)/bin/ruff check .") < recipe.index("$(VENV)/bin/mypy"), recipe


def test_mypy_checks_every_package_of_the_app_and_the_libraries():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"}
    assert packages <= set(MYPY["files"]), sorted(packages - set(MYPY["files"]))
    assert MYPY["python_version"] == "3.11"


def _checked_sources():
    for folder in MYPY["files"]:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path
    yield from sorted((ROOT / MYPY["mypy_path"]).rglob("*.pyi"))


def test_every_type_ignore_names_its_error_code_and_gives_a_reason():
    bare = []
    for path in _checked_sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found = TYPE_IGNORE.search(line)
            if found and (not found["codes"] or not found["rest"].strip().lstrip("#").strip()):
                bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, "a `# type: ignore` needs [code] and, after it, `# why`:\n" + "\n".join(bare)


def test_every_override_of_the_type_check_says_why():
    text = (ROOT / "pyproject.toml").read_text()
    blocks = text.split("[[tool.mypy.overrides]]")[1:]
    assert blocks, "no [[tool.mypy.overrides]]"
    for block in blocks:
        assert block.lstrip().startswith("#"), f"override without a comment saying why:\n{block[:300]}"


@pytest.mark.parametrize("attribute", ["names", "values", "labels", "choices"])
def test_the_choices_stub_matches_django_class_attributes(attribute):
    """typings/django/db/models/__init__.pyi gives choices classes these attributes and str members:
    Django's own TextChoices must have them, or the stub hides a real error."""

    class Colour(models.TextChoices):
        RED = "red", "Red"

    stub = (ROOT / "typings" / "django" / "db" / "models" / "__init__.pyi").read_text()
    assert f"def {attribute}(cls)" in stub
    assert getattr(Colour, attribute)
    assert isinstance(Colour.RED, str) and Colour.RED == "red" and Colour.RED.label == "Red"
