from django.urls import path

from . import pages

app_name = "evaluation_pages"
urlpatterns = [
    path("leaderboard/", pages.leaderboard, name="leaderboard"),
    path("keys/new/", pages.key_create, name="key_create"),
    path("keys/<int:key_id>/revoke/", pages.key_revoke, name="key_revoke"),
    path("publish/", pages.publish, name="publish"),
    path("b/<slug:slug>/", pages.public_benchmark, name="public"),
]
