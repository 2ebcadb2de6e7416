from django.apps import AppConfig


class ExportsConfig(AppConfig):
    """No models: the app is here for its management commands (``export_*``) and the study list's download
    actions (``exports/admin.py``)."""

    name = "exports"
    verbose_name = "Clicklab exports"
