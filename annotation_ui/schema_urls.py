"""The URL conf the annotator API's OpenAPI schema is generated from (``/api/annotator/schema/``): the
token-only annotator endpoints (the batch player's and the corrective player's), nothing else. The researcher API has its own (``collector.api.schema_urls``)."""

from django.urls import path

from . import api, corrective_api

ANNOTATOR_SCHEMA = {
    "TITLE": "Clicklab annotator API",
    "DESCRIPTION": (
        "What the batch player (and, under `corrective/`, the corrective player) sends. Token-only: the session token of the task link is the only credential "
        "(no cookies, no CSRF). Every 4xx body is JSON `{error, field, ...}`: `error` names the field, the "
        "value and what to do; `field` is its dotted path or null; 409 bodies carry a machine-readable `reason`."
    ),
    "VERSION": "1.0.0",
    "SCHEMA_PATH_PREFIX": "/api/annotator/",
}

urlpatterns = [
    path("api/annotator/<str:token>/state", api.state),
    path("api/annotator/<str:token>/client", api.client),
    path("api/annotator/<str:token>/click", api.click),
    path("api/annotator/<str:token>/presented", api.presented),
    path("api/annotator/<str:token>/problem", api.problem),
    path("api/annotator/<str:token>/heartbeat", api.heartbeat),
    path("api/annotator/<str:token>/finish", api.finish),
] + [
    path(f"api/annotator/<str:token>/corrective/{name}", getattr(corrective_api, name))
    for name in ("state", "click", "undo", "submit", "skip", "done", "finish")
]
