from django.apps import AppConfig


class AnnotationUiConfig(AppConfig):
    name = "annotation_ui"
    verbose_name = "Annotator UI"
