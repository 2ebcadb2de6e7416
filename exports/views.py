"""Download views: a researcher who may see a study gets its exports (login required, per-study rule).

``GET /exports/studies/<id>/rclicks.zip[?include_invalid=1&previews=1]``,
``GET /exports/studies/<id>/full.parquet``, ``GET /exports/studies/<id>/full.jsonl`` and
``GET /exports/studies/<id>/full.manifest.json`` (what the full export writes beside its file: datasets,
content hashes, round rules; a Parquet download carries it in its metadata, a JSON Lines one cannot).
A study the user may not see answers 404, the same as a study that does not exist.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from collector.selectors.permissions import study_visible_or_404
from exports.archive import corrective_zip_write, full_file_write, rclicks_zip_write
from exports.full import full_manifest_for, pyarrow_available
from exports.selectors import ExportError

LOGIN_URL = getattr(settings, "RESEARCHER_LOGIN_URL", settings.LOGIN_URL)
_TRUE = {"1", "true", "yes", "on"}


def _flag(request: HttpRequest, name: str) -> bool:
    return request.GET.get(name, "").lower() in _TRUE


def _refused(exc: ExportError) -> HttpResponse:
    return HttpResponse(f"Export failed: {exc}\n", status=409, content_type="text/plain; charset=utf-8")


@require_GET
@login_required(login_url=LOGIN_URL)
def study_rclicks_zip(request: HttpRequest, study_id: int) -> HttpResponse:
    study = study_visible_or_404(user=request.user, study_id=study_id)
    previews = True if _flag(request, "previews") else None
    try:
        handle, _ = rclicks_zip_write(
            study_ids=[study.pk], include_invalid=_flag(request, "include_invalid"), previews=previews
        )
    except ExportError as exc:
        return _refused(exc)
    return FileResponse(
        handle, as_attachment=True, filename=f"study-{study.pk}-rclicks.zip", content_type="application/zip"
    )


def _full(request: HttpRequest, study_id: int, format: str) -> HttpResponse:
    study = study_visible_or_404(user=request.user, study_id=study_id)
    if format == "parquet" and not pyarrow_available():
        return HttpResponse(
            "Parquet needs pyarrow, which this server lacks; download full.jsonl instead.\n",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
    try:
        handle, _ = full_file_write(study_ids=[study.pk], format=format)
    except ExportError as exc:
        return _refused(exc)
    content_type = "application/vnd.apache.parquet" if format == "parquet" else "application/x-ndjson"
    return FileResponse(
        handle, as_attachment=True, filename=f"study-{study.pk}-full.{format}", content_type=content_type
    )


@require_GET
@login_required(login_url=LOGIN_URL)
def study_full_parquet(request: HttpRequest, study_id: int) -> HttpResponse:
    return _full(request, study_id, "parquet")


@require_GET
@login_required(login_url=LOGIN_URL)
def study_full_jsonl(request: HttpRequest, study_id: int) -> HttpResponse:
    return _full(request, study_id, "jsonl")


@require_GET
@login_required(login_url=LOGIN_URL)
def study_full_manifest(request: HttpRequest, study_id: int) -> HttpResponse:
    study = study_visible_or_404(user=request.user, study_id=study_id)
    format = "jsonl" if request.GET.get("format") == "jsonl" else "parquet"
    try:
        manifest = full_manifest_for(study_ids=[study.pk], format=format)
    except ExportError as exc:
        return _refused(exc)
    response = JsonResponse(manifest, json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="study-{study.pk}-full.manifest.json"'
    return response


@require_GET
@login_required(login_url=LOGIN_URL)
def study_corrective_zip(request: HttpRequest, study_id: int) -> HttpResponse:
    """``GET /exports/studies/<id>/corrective.zip``: masks (COCO RLE + PNGs), click log and report."""
    study = study_visible_or_404(user=request.user, study_id=study_id)
    try:
        handle, _ = corrective_zip_write(study_id=study.pk)
    except ExportError as exc:
        return _refused(exc)
    return FileResponse(
        handle,
        as_attachment=True,
        filename=f"study-{study.pk}-corrective.zip",
        content_type="application/zip",
    )
