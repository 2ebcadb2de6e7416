"""The adapter interface and the standalone-link adapter."""

from __future__ import annotations

from dataclasses import dataclass, field

_ADAPTERS: dict[str, type[PlatformAdapter]] = {}


@dataclass
class FinishAction:
    """What the player does when the server holds all clicks of a batch.

    ``kind``: ``show_code`` (display ``code``), ``redirect`` (go to ``url``), or ``auto_post`` (POST
    ``fields`` to ``url`` from a form, as MTurk's externalSubmit needs).
    """

    kind: str
    code: str = ""
    url: str = ""
    fields: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "code": self.code, "url": self.url, "fields": dict(self.fields)}


class PlatformAdapter:
    """Base: every platform-specific action. Subclasses override what their platform supports."""

    name = ""
    framed = False  # the platform shows our pages inside its own frame

    def finish_action(self, *, session) -> FinishAction:
        return FinishAction(kind="show_code", code=session.completion_code)


def register_adapter(cls: type[PlatformAdapter]) -> type[PlatformAdapter]:
    _ADAPTERS[cls.name] = cls
    return cls


def get_adapter(platform: str) -> PlatformAdapter:
    from . import link  # noqa: F401  (registers the built-in adapters)

    try:
        return _ADAPTERS[platform]()
    except KeyError:
        raise ValueError(
            f"no adapter for platform {platform!r}; known: {', '.join(sorted(_ADAPTERS))}"
        ) from None
