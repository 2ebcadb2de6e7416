"""The URL conf the OpenAPI schema is generated from: the researcher API only (never the annotator API)."""

from django.urls import include, path

urlpatterns = [path("api/researcher/", include("collector.api.urls"))]
