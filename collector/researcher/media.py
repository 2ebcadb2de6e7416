"""Files under MEDIA_ROOT for the researcher area, through a login-checked view; nothing serves them directly.

Ground-truth masks, original images, next-round masks and rendered stimuli all live under MEDIA_ROOT. No URL
maps onto that folder (not in DEBUG either): annotators get their pictures only through the session-scoped
stimulus views of ``annotation_ui``, researchers through the pages of this area and this view, which
``MEDIA_URL`` points at (so ``FieldFile.url``, e.g. the admin's file links, lands here).

A file is served only when a row names it: a dataset's images and masks to every researcher (the same rule as
the study form and ``instance_preview``: datasets are shared by the researchers of the site), a next-round
target's masks to the researchers who may see its study. Anything else is a 404, whoever asks.
"""

from __future__ import annotations

import mimetypes

from django.core.exceptions import SuspiciousFileOperation
from django.core.files.storage import default_storage
from django.db.models import Q
from django.http import FileResponse, Http404
from django.views.decorators.http import require_GET

from collector.models import Image, Instance, Target
from collector.selectors.permissions import studies_visible_to

from .access import researcher_required


def media_owner(name: str) -> tuple[str, int] | None:
    """``("dataset", id)`` or ``("study", id)`` of the row that names the media file ``name``; None if none."""
    if not name:
        return None
    image = Image.objects.filter(file=name).values_list("dataset_id", flat=True).first()
    if image is not None:
        return ("dataset", image)
    instance = (
        Instance.objects.filter(Q(mask_file=name) | Q(source_mask_file=name) | Q(ignore_file=name))
        .values_list("image__dataset_id", flat=True)
        .first()
    )
    if instance is not None:
        return ("dataset", instance)
    study = (
        Target.objects.filter(Q(previous_mask_file=name) | Q(error_mask_file=name))
        .values_list("round__study_id", flat=True)
        .first()
    )
    if study is not None:
        return ("study", study)
    return None


@researcher_required
@require_GET
def media_file(request, name: str):
    """``MEDIA_URL<name>``: the file for a researcher who may see what it belongs to; 404 otherwise."""
    owner = media_owner(name)
    if owner is None:
        raise Http404("no such file")
    kind, owner_id = owner
    if kind == "study" and not studies_visible_to(request.user).filter(pk=owner_id).exists():
        raise Http404("no such file")
    try:
        handle = default_storage.open(name, "rb")
    except (FileNotFoundError, SuspiciousFileOperation):
        raise Http404("no such file") from None
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    response = FileResponse(handle, content_type=content_type)
    response["Cache-Control"] = "private, no-store"
    return response
