from django.apps import AppConfig


class CollectorConfig(AppConfig):
    name = "collector"
    verbose_name = "Clicklab"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import checks  # noqa: F401  (registers the system checks)
