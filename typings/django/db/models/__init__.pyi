# The one piece of django-stubs this project types by hand (django-stubs is not a dependency; see [tool.mypy]
# in pyproject.toml): the choices enums, whose members are str (so `mode == DisplayMode.OBJECT_CUTOUT` with a
# str `mode` type-checks) and whose classes carry Django's `names`, `values`, `labels` and `choices`.
# Everything else in django.db.models is Any, as it is without stubs. (IntegerChoices is not used here.)
import enum
from typing import Any

def __getattr__(name: str) -> Any: ...

class ChoicesType(enum.EnumMeta):
    @property
    def names(cls) -> list[str]: ...
    @property
    def choices(cls) -> list[tuple[Any, str]]: ...
    @property
    def labels(cls) -> list[str]: ...
    @property
    def values(cls) -> list[Any]: ...

class Choices(enum.Enum, metaclass=ChoicesType):  # type: ignore[misc]  # a base without members, as enum.Enum
    @property
    def label(self) -> str: ...

class TextChoices(str, Choices): ...  # type: ignore[misc]  # a base without members, as Choices
