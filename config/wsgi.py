import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from django.urls import URLPattern, URLResolver, get_resolver  # noqa: E402  (after Django is set up)
from django.utils.module_loading import import_string  # noqa: E402

#: the apps' own boot steps, by dotted name (config imports no app module)
APP_WARM_STEPS = ("annotation_ui.warm.annotator_api_warm",)


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


def warm_process() -> None:
    """What each gunicorn worker does once at boot, before it serves a request, so no request of a burst pays
    for it (each cost a request its thread for up to a second while the others waited for the GIL):

    * the URL configuration, and with it every view module;
    * the apps' steps (``APP_WARM_STEPS``: the annotator API's platform adapters, broker transport and
      validators, ``annotation_ui.warm``);
    * drf-spectacular's extension classes and the kept schemas (``_warm_openapi``).

    Connects nowhere (tests/config/test_wsgi_warm.py)."""
    resolver = get_resolver()
    resolver.url_patterns  # noqa: B018  (the attribute's lookup is the import)
    for step in APP_WARM_STEPS:
        import_string(step)()
    _warm_openapi(resolver.url_patterns)


warm_process()
