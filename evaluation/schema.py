"""The evaluation API's OpenAPI schema, generated once per process and served from memory.

drf-spectacular generates a schema per request, and the first generation in a process is not thread-safe: it
resolves its extension classes lazily (``OpenApiGeneratorExtension._load_class`` replaces a dotted name by
the class in place, so a second thread can find ``None`` there) and it patches its global settings with the
view's ``custom_settings`` for the length of the generation. On a freshly started gunicorn worker (gthread),
3-4 of 8 concurrent ``GET /api/eval/schema/`` were 500s. Here the schema is generated when the worker boots
(``config/wsgi.py`` calls :meth:`CachedSchemaView.warm_schema` on every schema view that has it), else by the
first request, under a lock; every later request gets the stored dict, rendered by the negotiated renderer.
The schema depends on nothing in the request (``SERVE_PUBLIC``: every endpoint, whoever asks).
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from drf_spectacular.settings import patched_settings, spectacular_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView
from rest_framework.response import Response


class CachedSchemaView(SpectacularAPIView):
    """``SpectacularAPIView`` whose schema is generated once per process (see the module docstring)."""

    _schemas: ClassVar[dict[tuple, tuple[dict, str]]] = {}  # (schema, title) by view configuration
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def warm_schema(cls, **initkwargs: Any) -> None:
        """Generate the schema of the view ``cls.as_view(**initkwargs)`` describes (at boot, no request)."""
        cls(**initkwargs)._schema()

    def _cache_key(self) -> tuple:
        return (type(self).__name__, str(self.urlconf), repr(sorted((self.custom_settings or {}).items())))

    def _schema(self) -> tuple[dict, str]:
        key = self._cache_key()
        stored = self._schemas.get(key)
        if stored is not None:
            return stored
        with self._lock:  # one generation at a time in this process, and each only once
            stored = self._schemas.get(key)
            if stored is None:
                with patched_settings(self.custom_settings):
                    generator = self.generator_class(urlconf=self.urlconf, api_version=self.api_version,
                                                     patterns=self.patterns)  # fmt: skip
                    schema = generator.get_schema(request=None, public=self.serve_public)
                    title = spectacular_settings.TITLE or "schema"
                stored = self._schemas[key] = (schema, title)
        return stored

    @extend_schema(**SCHEMA_KWARGS)  # as SpectacularAPIView.get documents itself
    def get(self, request, *args, **kwargs):
        schema, title = self._schema()
        suffix = self.perform_content_negotiation(request, force=True)[0].format
        return Response(data=schema, headers={"Content-Disposition": f'inline; filename="{title}.{suffix}"'})
