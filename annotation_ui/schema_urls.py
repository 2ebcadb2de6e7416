"""The URL conf the annotator API's OpenAPI schema is generated from (``/api/annotator/schema/``): the
token-only annotator endpoints (the batch player's and the corrective player's), nothing else. The researcher API has its own (``collector.api.schema_urls``)."""

from django.urls import path

from . import api, corrective_api


def closed_request_bodies(result, generator, request, public):
    """drf-spectacular postprocessing hook: every request body of the annotator API is documented with
    ``additionalProperties: false``. The player sends the declared fields only; an extra key is not read, but the
    bounded parser still refuses what it may not hold (a control character, a deep nesting, a long integer),
    so a body with extras is not one the schema can promise to be taken."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object":
            component["additionalProperties"] = False
    return result


ANNOTATOR_SCHEMA = {
    "TITLE": "Clicklab annotator API",
    "DESCRIPTION": (
        "What the batch player (and, under `corrective/`, the corrective player) sends. Token-only: the session token of the task link is the only credential "
        "(no cookies, no CSRF). Every error body is the envelope `{code, message, field, ...}`: `code` is "
        "machine-readable (a 409's refusal reason), `message` names the field, the value and what to do (in the "
        "worker's language), `field` is its dotted path or null."
    ),
    "VERSION": "1.0.0",
    "SCHEMA_PATH_PREFIX": "/api/annotator/",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "annotation_ui.schema_urls.closed_request_bodies",
    ],
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
