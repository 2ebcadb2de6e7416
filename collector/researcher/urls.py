from django.contrib.auth import views as auth_views
from django.urls import path

from . import dataset_views, media, views

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
    path("studies/live/", views.study_list_live, name="study_list_live"),
    path("studies/new/", views.study_create, name="study_create"),
    path("studies/new/estimate/", views.budget_estimate, name="budget_estimate"),
    path(
        "preview/instances/<int:instance_id>/<str:mode>.png", views.instance_preview, name="instance_preview"
    ),
    path("datasets/", dataset_views.dataset_list, name="dataset_list"),
    path("datasets/import/", dataset_views.dataset_import, name="dataset_import"),
    path(
        "datasets/imports/<int:import_id>/", dataset_views.dataset_import_detail, name="dataset_import_detail"
    ),
    path(
        "datasets/imports/<int:import_id>/live/",
        dataset_views.dataset_import_live,
        name="dataset_import_live",
    ),
    path("studies/<int:study_id>/", views.study_detail, name="study_detail"),
    path(
        "studies/<int:study_id>/platform-settings/",
        views.study_platform_settings,
        name="study_platform_settings",
    ),
    *[
        path(
            f"studies/<int:study_id>/{action}/",
            views.study_action,
            {"action": action},
            name=f"study_{action}",
        )
        for action in ("publish", "pause", "close", "sync")
    ],
    path(
        "studies/<int:study_id>/rounds/<int:round_id>/retry-build/",
        views.round_retry_build,
        name="round_retry_build",
    ),
    path("studies/<int:study_id>/live/", views.study_live, name="study_live"),
    path("studies/<int:study_id>/preview/check", views.preview_check, name="preview_check"),
    path("studies/<int:study_id>/sessions/", views.session_list, name="session_list"),
    path("studies/<int:study_id>/sessions/<int:session_id>/", views.session_detail, name="session_detail"),
    path(
        "studies/<int:study_id>/sessions/<int:session_id>/trials/<int:position>.png",
        views.session_trial_picture,
        name="session_trial_picture",
    ),
    path(
        "studies/<int:study_id>/sessions/<int:session_id>/review/",
        views.session_review,
        name="session_review",
    ),
    *[
        path(
            f"studies/<int:study_id>/sessions/<int:session_id>/{action}/",
            views.session_control,
            {"action": action},
            name=f"session_{action}",
        )
        for action in ("release", "expire")
    ],
    path("studies/<int:study_id>/workers/<int:worker_id>/block/", views.worker_block, name="worker_block"),
    path("studies/<int:study_id>/bots/run/", views.study_bots_run, name="study_bots_run"),
    path("studies/<int:study_id>/bots/remove/", views.study_bots_remove, name="study_bots_remove"),
    path("studies/<int:study_id>/charts/<str:kind>.png", views.study_chart, name="study_chart"),
    path("studies/<int:study_id>/targets/", views.target_list, name="target_list"),
    path("studies/<int:study_id>/targets/<int:target_id>/", views.target_detail, name="target_detail"),
    path(
        "studies/<int:study_id>/targets/<int:target_id>/heatmap.png",
        views.target_heatmap,
        name="target_heatmap",
    ),
    path("studies/<int:study_id>/workers/", views.worker_table, name="worker_table"),
    path("studies/<int:study_id>/quality/", views.study_quality, name="study_quality"),
    # MEDIA_URL points here: files under MEDIA_ROOT only through this login-checked view
    path("files/<path:name>", media.media_file, name="media_file"),
]
