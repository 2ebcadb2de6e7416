from django.conf import settings
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("exports/", include("exports.urls")),
    path("", include("annotation_ui.urls")),
]

if settings.DEBUG:
    from django.conf.urls.static import static

    urlpatterns += static(settings.MEDIA_URL, document_root=settings.MEDIA_ROOT)
urlpatterns += [path("researcher/", include("collector.researcher.urls"))]
urlpatterns += [path("api/researcher/", include("collector.api.urls"))]
