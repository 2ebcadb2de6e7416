from django.urls import path

from . import pages

app_name = "evaluation_pages"
urlpatterns = [
    path("leaderboard/", pages.leaderboard, name="leaderboard"),
    path("keys/new/", pages.key_create, name="key_create"),
    path("keys/<int:key_id>/revoke/", pages.key_revoke, name="key_revoke"),
    path("publish/", pages.publish, name="publish"),
    path("name/", pages.rename, name="rename"),
    path("local-runs/upload/", pages.local_upload, name="local_upload"),
    path("runs/<uuid:run_id>/", pages.run_page, name="run"),
    path("local/<uuid:run_id>/", pages.local_page, name="local"),
    path("b/<slug:slug>/", pages.public_benchmark, name="public"),
]
