"""The URL conf the evaluation API's OpenAPI schema is generated from."""

from django.urls import include, path

urlpatterns = [path("api/eval/", include("evaluation.urls"))]
