# Only so that mypy finds typings/django/db/models/__init__.pyi: everything in django is Any, as without stubs.
from typing import Any

def __getattr__(name: str) -> Any: ...
