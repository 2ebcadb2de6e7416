"""System checks for the rules settings alone cannot enforce."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.checks import Error, register


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@register("security")
def media_root_is_never_served(app_configs=None, **kwargs) -> list[Error]:
    """MEDIA_ROOT (ground-truth masks, originals) must not lie where static files are served from, and
    MEDIA_URL must be the login-checked view, not a folder a web server maps."""
    media = Path(settings.MEDIA_ROOT).resolve()
    # STATICFILES_DIRS entries are paths or (prefix, path) pairs
    dirs = [entry[1] if isinstance(entry, tuple | list) else entry for entry in settings.STATICFILES_DIRS]
    served = [Path(settings.STATIC_ROOT), *map(Path, dirs)]
    errors = []
    for folder in served:
        folder = folder.resolve()
        if _inside(media, folder) or _inside(folder, media):
            errors.append(
                Error(
                    f"MEDIA_ROOT={media} overlaps the static folder {folder}, which is served to anyone: "
                    "ground-truth masks would be public. Set CLICKLAB_MEDIA_ROOT to a folder of its own.",
                    id="clicklab.E001",
                )
            )
    if settings.MEDIA_URL.strip("/") != "researcher/files":
        errors.append(
            Error(
                f"MEDIA_URL={settings.MEDIA_URL!r}: media files must be served by the login-checked view "
                "/researcher/files/ only; leave MEDIA_URL as config/settings.py sets it.",
                id="clicklab.E002",
            )
        )
    return errors
