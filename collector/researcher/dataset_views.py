"""The researcher area's datasets: the list, the import page (an uploaded archive or a folder under the import
root) and each import's progress and result page. The import itself runs on a worker
(``collector.services.dataset_imports``); its page polls ``dataset_import_live``."""

from __future__ import annotations

from django.contrib import messages
from django.core.files.uploadhandler import FileUploadHandler, SkipFile
from django.db.models import Count
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET

from collector.models import Dataset, DatasetImport
from collector.services import dataset_imports as import_services

from .access import researcher_required
from .forms import ArchiveImportForm, FolderImportForm

#: How often the import page asks for the progress.
IMPORT_POLL_MS = 1000
RECENT_IMPORTS = 20


class UploadLimit(FileUploadHandler):
    """Drops an uploaded file as soon as it passes ``limit`` bytes (the rest of the body is read and
    discarded), remembering its name, so the page can say which file was too large."""

    def __init__(self, request=None, *, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0
        self.too_large: str | None = None

    def new_file(self, *args, **kwargs) -> None:
        super().new_file(*args, **kwargs)
        self.received = 0

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > self.limit:
            self.too_large = self.file_name
            raise SkipFile()
        return raw_data

    def file_complete(self, file_size):
        return None


def _limits_context() -> dict:
    limits = import_services.import_limits()
    return {
        "limits": limits,
        "upload_limit": import_services.size_text(limits.upload_max_bytes),
        "archive_limit": import_services.size_text(limits.archive_max_bytes),
        "suffixes": ", ".join(import_services.ARCHIVE_SUFFIXES),
        "members_limit": f"{limits.archive_max_members:,}",
    }


@researcher_required
def dataset_list(request):
    datasets = Dataset.objects.annotate(
        n_images=Count("images", distinct=True), n_instances=Count("images__instances")
    ).order_by("name")
    imports = DatasetImport.objects.select_related("dataset", "created_by")[:RECENT_IMPORTS]
    return render(request, "researcher/dataset_list.html", {"datasets": datasets, "imports": imports})


def _forms(data=None, files=None, *, source: str | None = None):
    folders = import_services.import_root_folders()
    archive = ArchiveImportForm(data if source == "archive" else None, files if source == "archive" else None,
                                prefix="archive")  # fmt: skip
    folder = FolderImportForm(data if source == "folder" else None, prefix="folder", folders=folders)
    return archive, folder, folders


def _render_import_page(request, archive_form, folder_form, folders, *, status: int = 200):
    context = {
        "archive_form": archive_form,
        "folder_form": folder_form,
        "folders": folders,
        **_limits_context(),
    }
    return render(request, "researcher/dataset_import.html", context, status=status)


@csrf_exempt  # the CSRF check runs in _import_post, after the upload handler is in place
@researcher_required
def dataset_import(request):
    """GET: the import page. POST ``source=archive`` (an upload) or ``source=folder``: the import is recorded and
    sent to a worker, and the browser goes to its progress page."""
    if request.method != "POST":
        archive_form, folder_form, folders = _forms()
        return _render_import_page(request, archive_form, folder_form, folders)
    limit = UploadLimit(request, limit=import_services.import_limits().upload_max_bytes)
    request.upload_handlers.insert(0, limit)
    return _import_post(request, limit)


@csrf_protect
def _import_post(request, limit: UploadLimit):
    source = request.POST.get("source", "")
    archive_form, folder_form, folders = _forms(request.POST, request.FILES, source=source)
    form = archive_form if source == "archive" else folder_form
    if limit.too_large:
        archive_form.add_error(
            "archive",
            f"{limit.too_large}: more than the upload limit of {import_services.size_text(limit.limit)}; split the "
            "dataset into smaller archives, or put its folder under the import root.",
        )
        return _render_import_page(request, archive_form, folder_form, folders, status=413)
    if source not in ("archive", "folder"):
        messages.error(request, "Upload an archive or choose a folder.")
        return _render_import_page(request, archive_form, folder_form, folders, status=400)
    if form.is_valid():
        try:
            job = import_services.dataset_import_request(
                user=request.user,
                archive=form.cleaned_data.get("archive"),
                folder=form.cleaned_data.get("folder", ""),
                layout=form.cleaned_data["layout"],
                name=form.cleaned_data["name"],
            )
        except import_services.ImportRequestError as error:
            field = error.field if error.field in form.fields else None
            form.add_error(field, str(error))
        else:
            return redirect("researcher:dataset_import_detail", import_id=job.pk)
    return _render_import_page(request, archive_form, folder_form, folders, status=400)


def _status_context(job: DatasetImport) -> dict:
    percent = min(100, round(100 * job.done / job.total)) if job.total else None
    took = (job.finished_at - job.started_at).total_seconds() if job.started_at and job.finished_at else None
    return {"job": job, "percent": percent, "took_s": took}


@researcher_required
def dataset_import_detail(request, import_id: int):
    job = get_object_or_404(DatasetImport.objects.select_related("dataset", "created_by"), pk=import_id)
    return render(
        request, "researcher/dataset_import_detail.html", {**_status_context(job), "poll_ms": IMPORT_POLL_MS}
    )


@never_cache
@researcher_required
@require_GET
def dataset_import_live(request, import_id: int):
    """The status part of the import page as HTML (polled by ``static/researcher/live.js`` until ``done``)."""
    job = get_object_or_404(DatasetImport.objects.select_related("dataset"), pk=import_id)
    html = render_to_string("researcher/_dataset_import_status.html", _status_context(job), request=request)
    return JsonResponse(
        {
            "html": {"import-status": html},
            "state": job.state,
            "done": job.finished,
            "at": timezone.now().isoformat(),
        }
    )
