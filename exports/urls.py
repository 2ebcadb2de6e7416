from django.urls import path

from exports import views

app_name = "exports"
urlpatterns = [
    path("studies/<int:study_id>/rclicks.zip", views.study_rclicks_zip, name="study-rclicks-zip"),
    path("studies/<int:study_id>/full.parquet", views.study_full_parquet, name="study-full-parquet"),
    path("studies/<int:study_id>/full.jsonl", views.study_full_jsonl, name="study-full-jsonl"),
    path("studies/<int:study_id>/full.manifest.json", views.study_full_manifest, name="study-full-manifest"),
    path("studies/<int:study_id>/corrective.zip", views.study_corrective_zip, name="study-corrective-zip"),
]
