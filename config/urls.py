from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("exports/", include("exports.urls")),
    path("", include("annotation_ui.urls")),
]
# No URL serves MEDIA_ROOT, in DEBUG or not: ground-truth masks and originals live there. Annotators get their
# pictures through the session-scoped stimulus views, researchers through login-checked views (MEDIA_URL
# points at collector.researcher.media).
urlpatterns += [path("researcher/", include("collector.researcher.urls"))]
urlpatterns += [path("api/researcher/", include("collector.api.urls"))]
urlpatterns += [
    path("api/eval/", include("evaluation.urls")),
    path("eval/", include("evaluation.pages_urls")),
]

# an unknown address under /api/ answers the APIs' JSON error envelope (config.api_errors)
handler404 = "config.api_errors.page_not_found"
