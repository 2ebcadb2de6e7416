"""Issue 19: every pinned package is used, the locks match the pins, the libraries declare what they import.

Checks, not tests of behaviour: they read requirements*.txt, the locks, pyproject.toml and the imports of the
code (``ast``), and fail with the package and what to do.
"""

from __future__ import annotations

import re
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions as _packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.imports import tree_imports

ROOT = Path(__file__).resolve().parent.parent.parent
APP_CODE = (
    "collector",
    "annotation_ui",
    "exports",
    "evaluation",
    "tasks",
    "config",
    "benchmark",
    "segmenters",
    "manage.py",
)
LIBRARIES = ("benchmark", "segmenters")

#: Pinned packages no ``import`` names, and why they are installed all the same.
USED_WITHOUT_IMPORT = {
    "psycopg": "Django's PostgreSQL engine, chosen by DATABASE_URL",
    "redis": "kombu's Redis transport, chosen by CELERY_BROKER_URL",
    "whitenoise": "named as a string in settings.MIDDLEWARE and STORAGES",
    "gunicorn": "the production web server (README, config/gunicorn.py)",
    "django-axes": "login throttling, named as strings in settings (INSTALLED_APPS, AUTHENTICATION_BACKENDS, MIDDLEWARE)",
    "segment-anything": "loaded by path in segmenters/sam.py (import_isolated_subpackage)",
    "setuptools": "pkg_resources, which toloka-kit 1.2.3 imports",
    "httpx": "toloka-kit's client (pinned: toloka-kit imports only with these versions)",
    "cattrs": "toloka-kit's (pinned for the same reason)",
    "attrs": "toloka-kit's (pinned for the same reason)",
    "tenacity": "toloka-kit's (pinned for the same reason)",
}


@cache
def packages_distributions() -> dict[str, list[str]]:
    return _packages_distributions()


def _requirements(path: Path) -> list[Requirement]:
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [Requirement(line) for line in lines if line and not line.startswith("-")]


def _lock(path: Path) -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", path.read_text(), flags=re.M)
    return {canonicalize_name(name): version for name, version in pins}


def _imported_modules(folders, *, root: Path = ROOT) -> set[str]:
    return {ref.top for folder in folders for ref in tree_imports(folder, root=root, migrations=False)}


def _distributions_of(modules: set[str]) -> set[str]:
    owners = packages_distributions()
    return {canonicalize_name(dist) for module in modules for dist in owners.get(module, [])}


def test_every_runtime_pin_is_imported_or_has_a_stated_reason():
    imported = _distributions_of(_imported_modules(APP_CODE))
    pinned = {canonicalize_name(req.name) for req in _requirements(ROOT / "requirements.txt")}
    unused = sorted(pinned - imported - set(USED_WITHOUT_IMPORT))
    assert not unused, (
        f"requirements.txt pins {unused}, which no code imports: remove the pin (and run `make lock`), or add "
        "the package to USED_WITHOUT_IMPORT in this file with the reason it is needed."
    )
    stale = sorted(set(USED_WITHOUT_IMPORT) - pinned)
    assert not stale, f"USED_WITHOUT_IMPORT names {stale}, which requirements.txt no longer pins: drop them."


def test_the_locks_hold_every_pin_at_its_version():
    runtime, test = _lock(ROOT / "requirements.lock"), _lock(ROOT / "requirements-test.lock")
    for requirements, lock, name in (
        ("requirements.txt", runtime, "requirements.lock"),
        ("requirements-test.txt", test, "requirements-test.lock"),
    ):
        for req in _requirements(ROOT / requirements):
            version = lock.get(canonicalize_name(req.name))
            assert version is not None and req.specifier.contains(version, prereleases=True), (
                f"{requirements} asks for {req}, {name} has {req.name}=={version}: run `make lock`."
            )
    assert {name: test[name] for name in runtime} == runtime, (
        "the test lock must keep the runtime lock's versions"
    )
    assert "sqlalchemy" not in runtime and "cryptography" not in runtime  # used by nothing (issue 19)


def test_no_pin_carries_a_local_version_label():
    """A local label (``torch==2.13.0+cpu``) names a build only one machine's wheel folder holds: on a machine
    with the public index alone the install stops at it. Which torch build is installed is TORCH_INDEX_URL's
    choice (Makefile), never the lock's."""
    for name in ("requirements.txt", "requirements-test.txt", "requirements.lock", "requirements-test.lock"):
        labelled = re.findall(r"^([A-Za-z0-9_.\-]+==\S*\+\S*)", (ROOT / name).read_text(), flags=re.M)
        assert not labelled, (
            f"{name} pins {labelled} with a local version label: drop the '+...' part (`make lock` strips it); "
            "choose the build with TORCH_INDEX_URL instead (see the Makefile)."
        )


def test_the_libraries_declare_what_they_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {
        name: {canonicalize_name(Requirement(item).name) for item in items}
        for name, items in project["optional-dependencies"].items()
    }
    assert project["dependencies"] == []
    stdlib = set(sys.stdlib_module_names)
    for library, allowed in (
        ("segmenters", extras["segmenters"] | extras["models"]),
        (
            "benchmark",
            extras["benchmark"]
            | extras["segmenters"]
            | extras["models"]
            | extras["distributed"]
            | extras["remote"],
        ),
    ):
        # that they import neither Django nor the web app is tests/config/test_layers.py's check
        modules = _imported_modules([library]) - stdlib - set(LIBRARIES)
        undeclared = sorted(_distributions_of(modules) - allowed)
        assert not undeclared, f"{library}/ imports {undeclared}: add them to its extra in pyproject.toml."
        unknown = sorted(module for module in modules if module not in packages_distributions())
        assert not unknown, f"{library}/ imports {unknown}, which no installed distribution provides."
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert set(packages["include"]) == {f"{name}{suffix}" for name in LIBRARIES for suffix in ("", ".*")}
