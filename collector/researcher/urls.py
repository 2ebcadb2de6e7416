from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

app_name = "researcher"
urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="researcher/login.html", next_page="researcher:study_list"
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="researcher:login"), name="logout"),
    path("", views.study_list, name="study_list"),
    path("studies/new/", views.study_create, name="study_create"),
    path("studies/new/estimate/", views.budget_estimate, name="budget_estimate"),
    path(
        "preview/instances/<int:instance_id>/<str:mode>.png", views.instance_preview, name="instance_preview"
    ),
    path("studies/<int:study_id>/", views.study_detail, name="study_detail"),
    *[
        path(
            f"studies/<int:study_id>/{action}/",
            views.study_action,
            {"action": action},
            name=f"study_{action}",
        )
        for action in ("publish", "pause", "close")
    ],
    path("studies/<int:study_id>/charts/<str:kind>.png", views.study_chart, name="study_chart"),
    path("studies/<int:study_id>/targets/", views.target_list, name="target_list"),
    path("studies/<int:study_id>/targets/<int:target_id>/", views.target_detail, name="target_detail"),
    path(
        "studies/<int:study_id>/targets/<int:target_id>/heatmap.png",
        views.target_heatmap,
        name="target_heatmap",
    ),
    path("studies/<int:study_id>/workers/", views.worker_table, name="worker_table"),
]
