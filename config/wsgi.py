import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# Import the URL configuration (and with it every view module) now, while the worker boots, rather than in
# the first request each gunicorn worker answers: under a burst of arrivals that request would hold its thread
# for the imports (about a second) while the others wait for the GIL.
from django.urls import URLPattern, URLResolver, get_resolver  # noqa: E402  (after Django is set up)

get_resolver().url_patterns  # noqa: B018  (the attribute's lookup is the import)


def _warm_openapi(patterns) -> None:
    """Resolve drf-spectacular's extension classes once, before any thread serves a request, and generate the
    schema of every schema view that can keep it (``warm_schema``, evaluation/schema.py).

    drf-spectacular resolves an extension's target class on first use, in place and without a lock: on a cold
    gthread worker, concurrent schema requests found ``None`` there and answered 500 (3-4 of 8).
    """
    from drf_spectacular.plumbing import OpenApiGeneratorExtension

    pending = list(OpenApiGeneratorExtension.__subclasses__())  # each kind keeps its own registry
    while pending:
        extension = pending.pop()
        pending.extend(extension.__subclasses__())
        if isinstance(extension.target_class, str):
            extension._load_class()
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            _warm_openapi(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            warm = getattr(getattr(pattern.callback, "view_class", None), "warm_schema", None)
            if warm is not None:
                warm(**pattern.callback.view_initkwargs)


_warm_openapi(get_resolver().url_patterns)
