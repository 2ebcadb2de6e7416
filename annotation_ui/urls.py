from django.urls import path
from django.views.decorators.gzip import gzip_page
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny

from . import api, views
from .schema_urls import ANNOTATOR_SCHEMA

app_name = "annotation_ui"
urlpatterns = [
    path("", views.home, name="home"),
    path("s/<str:token>/", views.study_link_entry, name="study_link"),
    path("a/<str:token>/", views.player, name="player"),
    path("preview/<int:study_id>/", views.preview, name="preview"),
    path(
        "preview/<int:study_id>/stimulus/<int:target_id>/<str:kind>/<str:name>",
        views.preview_stimulus,
        name="preview_stimulus",
    ),
    path("api/annotator/<str:token>/state", api.state, name="api_state"),
    path("api/annotator/<str:token>/client", api.client, name="api_client"),
    path("api/annotator/<str:token>/click", api.click, name="api_click"),
    path("api/annotator/<str:token>/finish", api.finish, name="api_finish"),
    path("api/annotator/<str:token>/presented", api.presented, name="api_presented"),
    path("api/annotator/<str:token>/problem", api.problem, name="api_problem"),
    path("api/annotator/<str:token>/heartbeat", api.heartbeat, name="api_heartbeat"),
    path(
        "api/annotator/schema/",
        SpectacularAPIView.as_view(
            urlconf="annotation_ui.schema_urls",
            custom_settings=ANNOTATOR_SCHEMA,
            authentication_classes=[],
            permission_classes=[AllowAny],
        ),
        name="api_schema",
    ),
    path(
        "api/annotator/<str:token>/stimuli/<str:digest>.bin",
        views.stimuli_bundle,
        name="stimuli_bundle",
    ),
    path(
        "api/annotator/<str:token>/stimulus/<int:position>/<str:kind>/<str:name>",
        views.stimulus,
        name="stimulus",
    ),
    path(
        "jsi18n/player/",
        gzip_page(JavaScriptCatalog.as_view(packages=["annotation_ui"], domain="djangojs")),
        name="jsi18n",
    ),
]

# --- crowd-platform entries and exit (PLATFORMS) ---------------------------------------------------
from . import platform_entries  # noqa: E402

urlpatterns += [
    path("toloka/<int:study_id>/<str:device>/", platform_entries.toloka_entry, name="toloka_entry"),
    path("prolific/<int:study_id>/", platform_entries.prolific_entry, name="prolific_entry"),
    path(
        "prolific/<int:study_id>/<str:device>/", platform_entries.prolific_entry, name="prolific_entry_device"
    ),
    path("mturk/<int:study_id>/<str:device>/", platform_entries.mturk_entry, name="mturk_entry"),
    path("platform-exit/<str:token>/", platform_entries.platform_exit, name="platform_exit"),
]

# --- corrective-click campaigns (issue 17) ------------------------------------------------------------
from . import corrective_api  # noqa: E402

_CORRECTIVE = "api/annotator/<str:token>/corrective/"
urlpatterns += [
    path(_CORRECTIVE + "state", corrective_api.state, name="corrective_state"),
    path(_CORRECTIVE + "click", corrective_api.click, name="corrective_click"),
    path(_CORRECTIVE + "undo", corrective_api.undo, name="corrective_undo"),
    path(_CORRECTIVE + "submit", corrective_api.submit, name="corrective_submit"),
    path(_CORRECTIVE + "skip", corrective_api.skip, name="corrective_skip"),
    path(_CORRECTIVE + "done", corrective_api.done, name="corrective_done"),
    path(_CORRECTIVE + "finish", corrective_api.finish, name="corrective_finish"),
    path(_CORRECTIVE + "continue", corrective_api.continue_, name="corrective_continue"),
    path(_CORRECTIVE + "image/<int:item_id>", corrective_api.image, name="corrective_image"),
    path(_CORRECTIVE + "mask/<int:mask_id>.png", corrective_api.mask, name="corrective_mask"),
]
