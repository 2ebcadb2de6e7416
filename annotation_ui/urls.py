from django.urls import path

from . import views

app_name = "annotation_ui"
urlpatterns = [
    path("", views.home, name="home"),
]
