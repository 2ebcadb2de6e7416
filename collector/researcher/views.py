"""Pages of the researcher area. Each view authorizes, calls selectors or one service, and renders."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from collector.models import Dataset, DisplayMode, Instance, Target
from collector.selectors import budget as budget_selectors
from collector.selectors import pictures, progress
from collector.selectors import targets as target_selectors
from collector.selectors.permissions import studies_visible_to, user_can_change_study
from collector.selectors.workers import study_worker_table
from collector.services import studies as study_services

from .access import changeable_study_or_403, researcher_required, visible_study_or_404
from .forms import StudyForm

PNG_HEADERS = {"Cache-Control": "private, max-age=30"}


@researcher_required
def study_list(request):
    studies = (
        studies_visible_to(request.user)
        .select_related("dataset", "owner")
        .annotate(n_sessions=Count("sessions"))
        .order_by("-created_at")
    )
    return render(request, "researcher/study_list.html", {"studies": studies})


def _dataset_choices() -> list[dict]:
    """For the form's preview: each dataset's instance count and a sample instance."""
    rows = []
    for dataset in Dataset.objects.annotate(n_instances=Count("images__instances")).order_by("name"):
        sample = (
            Instance.objects.filter(image__dataset=dataset).order_by("image__stem", "object_stem").first()
        )
        rows.append(
            {
                "id": dataset.pk,
                "name": dataset.name,
                "instances": dataset.n_instances,
                "sample_instance": sample.pk if sample else None,
            }
        )
    return rows


@researcher_required
def study_create(request):
    form = StudyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        fields = {name: value for name, value in form.cleaned_data.items() if name not in {"name", "dataset"}}
        try:
            study = study_services.study_create(
                name=form.cleaned_data["name"],
                dataset=form.cleaned_data["dataset"],
                owner=request.user,
                **fields,
            )
        except ValidationError as error:
            form.add_error(None, error)
        else:
            messages.success(request, f"Study “{study.name}” created as a draft. Publish it when ready.")
            return redirect("researcher:study_detail", study_id=study.pk)
    return render(
        request,
        "researcher/study_form.html",
        {
            "form": form,
            "datasets_data": _dataset_choices(),
        },
    )


def _int_param(request, name: str, default: int) -> int:
    try:
        return max(0, int(request.GET.get(name, default)))
    except ValueError:
        return default


@researcher_required
@require_GET
def budget_estimate(request):
    """JSON estimate for the form (GET parameters: dataset, quota_pc, quota_mobile, batch_size, reward)."""
    dataset = Dataset.objects.filter(pk=_int_param(request, "dataset", 0)).first()
    if dataset is None:
        return JsonResponse({"error": "choose a dataset first."}, status=400)
    try:
        reward = Decimal(request.GET.get("reward", "0") or "0")
    except InvalidOperation:
        return JsonResponse({"error": "reward must be a decimal number such as 0.05."}, status=400)
    batch_size = _int_param(request, "batch_size", 10)
    if batch_size < 1:
        return JsonResponse({"error": "trials per batch must be at least 1."}, status=400)
    estimate = budget_selectors.budget_estimate(
        targets=Instance.objects.filter(image__dataset=dataset).count(),
        quota_pc=_int_param(request, "quota_pc", 25),
        quota_mobile=_int_param(request, "quota_mobile", 25),
        batch_size=batch_size,
        reward_per_batch=reward,
        currency=(request.GET.get("currency") or "USD")[:3],
    )
    return JsonResponse(
        {key: str(value) if isinstance(value, Decimal) else value for key, value in estimate.items()}
    )


@researcher_required
@require_GET
def instance_preview(request, instance_id: int, mode: str):
    """Researcher-only phase-B approximation (``mode`` a display mode) or the image (``mode`` = image)."""
    instance = get_object_or_404(Instance.objects.select_related("image"), pk=instance_id)
    if mode == "image":
        with instance.image.file.open("rb") as handle:
            content = handle.read()
        content_type = "image/png" if instance.image.file.name.lower().endswith(".png") else "image/jpeg"
        return HttpResponse(content, content_type=content_type, headers=PNG_HEADERS)
    if mode not in DisplayMode.values:
        raise Http404(f"display mode {mode!r} is unknown")
    png = pictures.instance_phase_b_preview(instance=instance, display_mode=mode)
    return HttpResponse(png, content_type="image/png", headers=PNG_HEADERS)


@researcher_required
def study_detail(request, study_id: int):
    study = visible_study_or_404(user=request.user, study_id=study_id)
    context = {
        "study": study,
        "can_change": user_can_change_study(request.user, study),
        "progress": progress.study_progress(study=study),
        "budget": budget_selectors.study_budget(study=study),
        "chart_kinds": pictures.CHART_KINDS,
        "payment_rule": progress.session_payment_state.__doc__,
    }
    return render(request, "researcher/study_detail.html", context)


_ACTIONS = {
    "publish": study_services.study_publish,
    "pause": study_services.study_pause,
    "close": study_services.study_close,
}


@researcher_required
@require_POST
def study_action(request, study_id: int, action: str):
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    service = _ACTIONS.get(action)
    if service is None:
        raise Http404(f"unknown action {action!r}")
    try:
        study = service(study_id=study.pk)
    except study_services.StudyStateError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Study is now {study.state}.")
    return redirect("researcher:study_detail", study_id=study.pk)


@researcher_required
@require_GET
def study_chart(request, study_id: int, kind: str):
    study = visible_study_or_404(user=request.user, study_id=study_id)
    if kind not in pictures.CHART_KINDS:
        raise Http404(f"chart {kind!r} is unknown")
    return HttpResponse(
        pictures.study_chart(study=study, kind=kind), content_type="image/png", headers=PNG_HEADERS
    )


@researcher_required
def target_list(request, study_id: int):
    study = visible_study_or_404(user=request.user, study_id=study_id)
    targets = target_selectors.study_targets(study=study)
    return render(request, "researcher/target_list.html", {"study": study, "targets": targets})


def _target_or_404(study, target_id: int) -> Target:
    try:
        return target_selectors.study_target_get(study=study, target_id=target_id)
    except Target.DoesNotExist:
        raise Http404(f"target {target_id} is not part of study {study.pk}") from None


@researcher_required
def target_detail(request, study_id: int, target_id: int):
    study = visible_study_or_404(user=request.user, study_id=study_id)
    target = _target_or_404(study, target_id)
    clicks = target_selectors.target_clicks(target=target)
    context = {
        "study": study,
        "target": target,
        "clicks": clicks,
        "heatmap_url": reverse("researcher:target_heatmap", args=[study.pk, target.pk]),
        "n_valid": sum(1 for c in clicks if c["is_valid"]),
        "n_invalid": sum(1 for c in clicks if c["is_valid"] is False),
    }
    return render(request, "researcher/target_detail.html", context)


@researcher_required
@require_GET
def target_heatmap(request, study_id: int, target_id: int):
    study = visible_study_or_404(user=request.user, study_id=study_id)
    target = _target_or_404(study, target_id)
    return HttpResponse(pictures.target_heatmap(target=target), content_type="image/png", headers=PNG_HEADERS)


@researcher_required
def worker_table(request, study_id: int):
    study = visible_study_or_404(user=request.user, study_id=study_id)
    return render(
        request, "researcher/worker_table.html", {"study": study, "workers": study_worker_table(study=study)}
    )
