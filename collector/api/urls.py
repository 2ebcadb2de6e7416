from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from . import views

app_name = "researcher_api"
urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(urlconf="collector.api.schema_urls"), name="schema"),
    path("datasets/", views.DatasetList.as_view(), name="datasets"),
    path("studies/", views.StudyListCreate.as_view(), name="studies"),
    path("studies/<int:study_id>/", views.StudyDetail.as_view(), name="study"),
    path("studies/<int:study_id>/publish/", views.StudyPublish.as_view(), name="study-publish"),
    path("studies/<int:study_id>/pause/", views.StudyPause.as_view(), name="study-pause"),
    path("studies/<int:study_id>/close/", views.StudyClose.as_view(), name="study-close"),
    path("studies/<int:study_id>/progress/", views.StudyProgress.as_view(), name="study-progress"),
    path("studies/<int:study_id>/budget/", views.StudyBudget.as_view(), name="study-budget"),
    path("studies/<int:study_id>/targets/", views.StudyTargets.as_view(), name="study-targets"),
    path(
        "studies/<int:study_id>/targets/<int:target_id>/",
        views.StudyTargetDetail.as_view(),
        name="study-target",
    ),
    path(
        "studies/<int:study_id>/targets/<int:target_id>/heatmap.png",
        views.StudyTargetHeatmap.as_view(),
        name="study-target-heatmap",
    ),
    path("studies/<int:study_id>/charts/<str:kind>.png", views.StudyChart.as_view(), name="study-chart"),
    path("studies/<int:study_id>/workers/", views.StudyWorkers.as_view(), name="study-workers"),
    path(
        "studies/<int:study_id>/qualifications/",
        views.StudyQualifications.as_view(),
        name="study-qualifications",
    ),
]
