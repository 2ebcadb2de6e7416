"""Predictors by name.

``get_predictor("embedded")`` builds the weight-free default; model adapters take their options as
keyword arguments (``get_predictor("sam", checkpoint="/path/sam_vit_b_01ec64.pth", variant="vit_b")``).
A name is *available* when its code can run in this environment (its Python dependencies import);
whether its checkpoint is present is only checked when the predictor is built, so the error can name
the file.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from segmenters.base import Predictor, SegmenterError

#: Returns None when the predictor's code can run here, else a message saying what is missing.
RequirementCheck = Callable[[], "str | None"]


@dataclass(frozen=True)
class _Entry:
    factory: Callable[..., Predictor]
    requirement: RequirementCheck | None


_REGISTRY: dict[str, _Entry] = {}
DEFAULT_PREDICTOR = "embedded"


def register(name: str, *, requirement: RequirementCheck | None = None):
    """Class/factory decorator: make ``name`` buildable through :func:`get_predictor`.

    ``requirement`` is called by :func:`available_predictors` and :func:`get_predictor`; it returns
    None when the code can run, or a message naming the missing package and how to install it.
    """

    def decorate(factory):
        if name in _REGISTRY and _REGISTRY[name].factory is not factory:
            raise SegmenterError(
                f"predictor name {name!r} is already registered by {_REGISTRY[name].factory!r}"
            )
        _REGISTRY[name] = _Entry(factory=factory, requirement=requirement)
        return factory

    return decorate


def unregister(name: str) -> None:
    """Forget ``name`` (a plug-in or test predictor registered for a while); unknown names are ignored."""
    _REGISTRY.pop(name, None)


def registered_predictors() -> list[str]:
    """Every registered name: ``"embedded"`` first, then in registration order."""
    _load_builtin_adapters()
    return sorted(_REGISTRY, key=lambda name: name != DEFAULT_PREDICTOR)


def available_predictors() -> list[str]:
    """Registered names whose code can run here: ``"embedded"`` first, then in registration order."""
    return [name for name in registered_predictors() if unavailable_reason(name) is None]


def unavailable_reason(name: str) -> str | None:
    """None when ``name`` can run here, else the message saying what to install."""
    entry = _entry(name)
    return None if entry.requirement is None else entry.requirement()


def predictor_variants(name: str) -> list[str]:
    """The named variants ``name`` accepts (``variant=`` option), default first; [] for predictors without
    variants (``embedded``)."""
    entry = _entry(name)
    variants = list(getattr(entry.factory, "variants", None) or [])
    default = _default_variant(entry.factory)
    if default in variants:
        variants.remove(default)
        variants.insert(0, default)
    return variants


def _default_variant(factory) -> str | None:
    try:
        parameter = inspect.signature(factory).parameters.get("variant")
    except (TypeError, ValueError):
        return None
    if parameter is None or not isinstance(parameter.default, str):
        variants = getattr(factory, "variants", None)
        return next(iter(variants)) if variants else None
    return parameter.default


def get_predictor(name: str, **options) -> Predictor:
    """Build the predictor registered as ``name`` with keyword ``options``.

    Raises :class:`SegmenterError` for an unknown name or missing code, and
    :class:`~segmenters.base.CheckpointError` for a missing or mismatched checkpoint.
    """
    entry = _entry(name)
    reason = None if entry.requirement is None else entry.requirement()
    if reason is not None:
        raise SegmenterError(f"predictor {name!r} cannot run here: {reason}")
    try:
        inspect.signature(entry.factory).bind(**options)
    except TypeError as error:
        # An unknown or misspelt keyword is a user error: name the predictor and the options it got.
        raise SegmenterError(
            f"predictor {name!r} rejected options {sorted(options)}: {error}. See segmenters/README.md "
            "for the options of each predictor."
        ) from error
    return entry.factory(**options)


def _entry(name: str) -> _Entry:
    _load_builtin_adapters()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SegmenterError(
            f"unknown predictor {name!r}; registered predictors are {list(_REGISTRY)}"
        ) from None


_BUILTIN_MODULES = (
    "segmenters.embedded",
    "segmenters.sam",
    "segmenters.sam2",
    "segmenters.mobile_sam",
    "segmenters.isegm",
)
_builtins_loaded = False


def _load_builtin_adapters() -> None:
    """Import the built-in predictor modules once; each registers itself on import.

    The embedded default is imported first so that it is registered first. Adapter modules import
    their heavy dependencies lazily, so importing them here is cheap and never fails.
    """
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    for module_name in _BUILTIN_MODULES:
        importlib.import_module(module_name)
