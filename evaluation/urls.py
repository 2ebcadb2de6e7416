from django.urls import path

from . import views
from .schema import CachedSchemaView

app_name = "evaluation_api"
urlpatterns = [
    path(
        "schema/",
        CachedSchemaView.as_view(
            urlconf="evaluation.schema_urls",
            custom_settings={
                "TITLE": "Clicklab evaluation API",
                "SCHEMA_PATH_PREFIX": "/api/eval/",
                "DESCRIPTION": "Run the click benchmark remotely; ground truth stays on the server. "
                "Authenticate with `Authorization: EvalKey <key>` or a researcher token.",
            },
        ),
        name="schema",
    ),  # fmt: skip
    path("health/", views.Health.as_view(), name="health"),
    path("keys/", views.KeyListCreate.as_view(), name="keys"),
    path("local-runs/", views.LocalRunListCreate.as_view(), name="local-runs"),
    path("datasets/", views.DatasetList.as_view(), name="datasets"),
    path("runs/", views.RunListCreate.as_view(), name="runs"),
    path("runs/<uuid:run_id>/", views.RunDetail.as_view(), name="run"),
    path("runs/<uuid:run_id>/next/", views.RunNext.as_view(), name="run-next"),
    path("runs/<uuid:run_id>/submit/", views.RunSubmit.as_view(), name="run-submit"),
    path(
        "runs/<uuid:run_id>/samples/<int:index>/image.png", views.SampleImage.as_view(), name="sample-image"
    ),
    path("runs/<uuid:run_id>/previous/", views.RunPrevious.as_view(), name="run-previous"),
    path("runs/<uuid:run_id>/report/", views.RunReport.as_view(), name="run-report"),
    path("runs/<uuid:run_id>/summary/", views.RunSummary.as_view(), name="run-summary"),
]
