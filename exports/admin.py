"""Admin actions on studies: download the RClicks zip or the full-fidelity export of the selection.

Added to the study list by ``collector.admin.study_admin_actions_add`` (after the study's own actions, before
the platform's), so the domain's admin never imports the exports.

The same per-study rule as everywhere (``collector.selectors.permissions.studies_visible_to``) is
applied to every selected study; one the user may not see refuses the whole download.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import FileResponse

from collector.admin import study_admin_actions_add
from collector.selectors.permissions import studies_visible_to
from exports.archive import full_file_write, rclicks_zip_write
from exports.full import default_format
from exports.selectors import ExportError


def _visible_ids(modeladmin, request, queryset) -> list[int] | None:
    ids = list(queryset.order_by("pk").values_list("pk", flat=True))
    visible = set(studies_visible_to(request.user).filter(pk__in=ids).values_list("pk", flat=True))
    hidden = [str(pk) for pk in ids if pk not in visible]
    if hidden:
        modeladmin.message_user(
            request,
            f"You may not export study {', '.join(hidden)}: ask its owner to add you to its researchers.",
            messages.ERROR,
        )
        return None
    return ids


def _name(ids: list[int]) -> str:
    return f"study-{ids[0]}" if len(ids) == 1 else f"studies-{'-'.join(map(str, ids[:5]))}"


@admin.action(description="Download RClicks export (clicks.csv + prev masks, zip)")
def download_rclicks_zip(modeladmin, request, queryset):
    ids = _visible_ids(modeladmin, request, queryset)
    if ids is None:
        return None
    try:
        handle, result = rclicks_zip_write(study_ids=ids)
    except ExportError as exc:
        modeladmin.message_user(request, f"Export failed: {exc}", messages.ERROR)
        return None
    return FileResponse(handle, as_attachment=True, filename=f"{_name(ids)}-rclicks.zip")


@admin.action(description="Download full-fidelity export (every click; Parquet, or JSONL without pyarrow)")
def download_full_export(modeladmin, request, queryset):
    ids = _visible_ids(modeladmin, request, queryset)
    if ids is None:
        return None
    format = default_format()
    try:
        handle, _ = full_file_write(study_ids=ids, format=format)
    except ExportError as exc:
        modeladmin.message_user(request, f"Export failed: {exc}", messages.ERROR)
        return None
    return FileResponse(handle, as_attachment=True, filename=f"{_name(ids)}-full.{format}")


study_admin_actions_add(download_rclicks_zip, download_full_export)
