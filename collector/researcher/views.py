"""Pages of the researcher area. Each view authorizes, calls selectors or one service, and renders."""

from __future__ import annotations

import json
import logging
import math
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from collector.models import Dataset, DisplayMode, Instance, PlatformCampaign, Round, Session, Target, Trial
from collector.models.studies import Platform, Study
from collector.platforms import PlatformError, get_adapter
from collector.selectors import budget as budget_selectors
from collector.selectors import corrective as corrective_selectors
from collector.selectors import corrective_quality, pictures, progress
from collector.selectors import links as link_selectors
from collector.selectors import monitor as monitor_selectors
from collector.selectors import platform_settings as platform_settings_selectors
from collector.selectors import reservations as reservation_selectors
from collector.selectors import segmenters as segmenter_selectors
from collector.selectors import session_detail as session_selectors
from collector.selectors import targets as target_selectors
from collector.selectors.permissions import studies_visible_to, study_visible_or_404, user_can_change_study
from collector.selectors.preview import preview_click_check
from collector.selectors.workers import study_worker_table
from collector.services import bots as bot_services
from collector.services import launch as launch_services
from collector.services import monitor as monitor_services
from collector.services import next_round as next_round_services
from collector.services import reservations as reservation_services
from collector.services import studies as study_services
from collector.services.validation import ValidationError as MaskMissing
from config.api_errors import error_response

from .access import changeable_study_or_403, researcher_json, researcher_required
from .forms import (
    RCLICKS_BATCH_SIZE,
    RCLICKS_VALID_SHARE,
    PlatformSettingsForm,
    StudyForm,
    batch_defaults,
    dataset_images,
)

logger = logging.getLogger(__name__)

#: How often the study page and the study list ask for fresh numbers (see ``study_live``).
LIVE_POLL_MS = 5000
#: How often at most the study page redraws its charts (matplotlib PNGs, the costly part), when the numbers changed.
LIVE_CHART_MS = 10000
RECENT_SESSIONS = 15
SESSIONS_PER_PAGE = 100

PNG_HEADERS = {"Cache-Control": "private, max-age=30"}
#: The share the quality page's download offers first: seed 001's "top 70 % masks have 90 % mIoU" (§5.4).
DEFAULT_TOP_PERCENT = 70


def _study_list_rows(user) -> list[dict]:
    studies = list(
        studies_visible_to(user)
        .select_related("dataset", "owner")
        .annotate(n_sessions=Count("sessions"))
        .order_by("-created_at")
    )
    summary = progress.studies_progress_summary(study_ids=[study.pk for study in studies])
    return [{"study": study, "progress": summary[study.pk]} for study in studies]


@researcher_required
def study_list(request):
    return render(
        request,
        "researcher/study_list.html",
        {"rows": _study_list_rows(request.user), "poll_ms": LIVE_POLL_MS},
    )


@never_cache
@researcher_required
@require_GET
def study_list_live(request):
    """The study list's rows as HTML (polled by ``static/researcher/live.js``)."""
    rows = _study_list_rows(request.user)
    html = render_to_string("researcher/_study_rows.html", {"rows": rows}, request=request)
    return JsonResponse({"html": {"study-rows": html}, "at": timezone.now().isoformat()})


def _dataset_choices() -> list[dict]:
    """For the form's preview and defaults: each dataset's instance count, its images with objects, the batch
    it can give without screen trials (``forms.batch_defaults``) and a sample instance."""
    rows = []
    for dataset in Dataset.objects.annotate(n_instances=Count("images__instances")).order_by("name"):
        sample = (
            Instance.objects.filter(image__dataset=dataset).order_by("image__stem", "object_stem").first()
        )
        images = dataset_images(dataset)
        rows.append(
            {
                "id": dataset.pk,
                "name": dataset.name,
                "instances": dataset.n_instances,
                "images": images,
                "defaults": batch_defaults(images=images),
                "sample_instance": sample.pk if sample else None,
            }
        )
    return rows


@researcher_required
def study_create(request):
    chosen = request.GET.get("dataset", "")  # "New study" from a dataset or an import's result
    form = StudyForm(request.POST or None, initial={"dataset": int(chosen)} if chosen.isdigit() else None)
    if request.method == "POST" and form.is_valid():
        try:
            study = study_services.study_create(
                name=form.cleaned_data["name"],
                dataset=form.cleaned_data["dataset"],
                owner=request.user,
                **form.study_fields(),
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
            "batch_rule_data": {"batch_size": RCLICKS_BATCH_SIZE, "valid_share": RCLICKS_VALID_SHARE},
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
    """JSON estimate for the form (GET parameters: dataset, quota_pc, quota_mobile, batch_size, reward,
    currency, platform): ``collector.selectors.budget.budget_estimate``, the one formula of every page."""
    dataset = Dataset.objects.filter(pk=_int_param(request, "dataset", 0)).first()
    if dataset is None:
        return error_response(400, "invalid", "choose a dataset first.", field="dataset")
    try:
        reward = Decimal(request.GET.get("reward", "0") or "0")
    except InvalidOperation:
        return error_response(400, "invalid", "reward must be a decimal number such as 0.05.", field="reward")
    batch_size = _int_param(request, "batch_size", 10)
    if batch_size < 1:
        return error_response(400, "invalid", "trials per batch must be at least 1.", field="batch_size")
    platform = request.GET.get("platform") or Platform.LINK
    if platform not in Platform.values:
        return error_response(400, "invalid", f"platform {platform!r} is unknown.", field="platform")
    estimate = budget_selectors.budget_estimate(
        targets=Instance.objects.filter(image__dataset=dataset).count(),
        quota_pc=_int_param(request, "quota_pc", 25),
        quota_mobile=_int_param(request, "quota_mobile", 25),
        batch_size=batch_size,
        reward_per_batch=reward,
        currency=(request.GET.get("currency") or "USD")[:3],
        platform=platform,
    )
    return JsonResponse(estimate)


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


def _study_actions(study: Study, campaign: PlatformCampaign | None) -> list[dict]:
    """The buttons the study page offers the owner now: ``{"action", "label", "style", "confirm"}``."""
    platform = study.platform != Platform.LINK
    name = study.get_platform_display()
    launched = campaign is not None and campaign.state == PlatformCampaign.State.OPEN
    actions = []
    if study.state == Study.State.DRAFT:
        actions.append({"action": "publish", "label": f"Launch on {name}" if platform else "Publish"})
    elif study.state == Study.State.PAUSED:
        actions.append({"action": "publish", "label": f"Resume on {name}" if platform else "Publish again"})
    elif study.state == Study.State.PUBLISHED and platform and not launched:
        actions.append({"action": "publish", "label": f"Finish the launch on {name}"})
    if study.state == Study.State.PUBLISHED:
        actions.append({"action": "pause", "label": "Pause recruiting" if platform else "Pause"})
    if campaign is not None:
        actions.append({"action": "sync", "label": f"Sync with {name} now"})
    if study.state != Study.State.CLOSED:
        actions.append(
            {"action": "close", "label": "Close", "style": "danger", "confirm": "Close this study for good?"}
        )
    return actions


def _live_context(study: Study, *, can_change: bool) -> dict:
    """What the live part of the study page shows (re-rendered by ``study_live``)."""
    campaign = PlatformCampaign.objects.filter(study=study).first()
    platform = launch_services.study_platform_status(study=study) if study.platform != Platform.LINK else None
    return {
        "study": study,
        "progress": progress.study_progress(study=study),
        "budget": budget_selectors.study_budget(study=study),
        "campaign": campaign,
        "platform": platform,
        "recent_sessions": session_selectors.study_sessions(study=study)[:RECENT_SESSIONS],
        "payment_rule": progress.session_payment_state.__doc__,
        "mask_provenance": segmenter_selectors.study_mask_provenance(study=study),
        "corrective": corrective_selectors.study_corrective_summary(study=study),
        "qualification": corrective_selectors.study_qualification_results(study=study),
        "reservations": reservation_selectors.study_reservations_summary(study=study),
        "running_sessions": monitor_selectors.study_running_sessions(study=study),
        "bots": bot_services.bot_summary(study=study),
        "can_change": can_change,
        "updated_at": timezone.now(),
    }


@researcher_required
def study_detail(request, study_id: int):
    study = study_visible_or_404(user=request.user, study_id=study_id)
    return _study_page(request, study)


def _study_page(
    request, study: Study, *, platform_form: PlatformSettingsForm | None = None, status: int = 200
):
    can_change = user_can_change_study(request.user, study)
    context = _live_context(study, can_change=can_change)
    if platform_form is None and can_change and study.platform != Platform.LINK:
        platform_form = PlatformSettingsForm(study=study)
    context.update(
        {
            "platform_settings": platform_settings_selectors.study_platform_settings(study=study),
            "platform_form": platform_form,
            "segmenter_label": segmenter_selectors.study_segmenter_label(study=study),
            "actions": _study_actions(study, context["campaign"]) if can_change else [],
            "chart_kinds": pictures.CHART_KINDS,
            "links": (
                link_selectors.study_annotator_links(study=study) if study.platform == Platform.LINK else []
            ),
            "links_loopback": link_selectors.public_base_is_loopback(),
            "public_base_url": settings.PUBLIC_BASE_URL,
            "poll_ms": LIVE_POLL_MS,
            "chart_ms": LIVE_CHART_MS,
            "default_top_percent": DEFAULT_TOP_PERCENT,
        }
    )
    return render(request, "researcher/study_detail.html", context, status=status)


@researcher_required
@require_POST
def study_platform_settings(request, study_id: int):
    """Save the platform settings of the study page's form (owner only); a refused value is shown beside
    its field, on the study page again (400)."""
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    if study.platform == Platform.LINK:
        raise Http404(f"study {study.pk} uses standalone links: it has no platform settings")
    form = PlatformSettingsForm(request.POST, study=study)
    if not form.is_valid():
        messages.error(request, "Platform settings not saved: see the message by the field.")
        return _study_page(request, study, platform_form=form, status=400)
    study_services.study_platform_config_update(study_id=study.pk, values=form.config_values())
    messages.success(request, f"{study.get_platform_display()} settings saved.")
    return redirect(reverse("researcher:study_detail", args=[study.pk]) + "#platform-settings")


@researcher_required
@require_POST
def round_retry_build(request, study_id: int, round_id: int):
    """Send a failed next-round build again (owner only), after the reason shown on the page was fixed."""
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    if not Round.objects.filter(pk=round_id, study=study).exists():
        raise Http404(f"round {round_id} is not part of study {study.pk}")
    if next_round_services.round_build_retry(round_id=round_id):
        messages.success(request, "The build of the next round was sent again; this page shows how it went.")
    else:
        messages.error(request, "Nothing to retry: that build has not failed, or its round exists already.")
    return redirect("researcher:study_detail", study_id=study.pk)


@never_cache
@researcher_required
@require_GET
def study_live(request, study_id: int):
    """The live part of the study page as HTML, and the study's state (polled every ``LIVE_POLL_MS``).

    Polling, not server-sent events: in production the web runs on gunicorn's sync workers, where an open
    event stream holds a whole worker for as long as a researcher keeps the page open, so a few open tabs
    would leave annotators' clicks waiting. A poll is one short request (a bounded number of queries)."""
    study = study_visible_or_404(user=request.user, study_id=study_id)
    context = _live_context(study, can_change=user_can_change_study(request.user, study))
    html = render_to_string("researcher/_study_live.html", context, request=request)
    return JsonResponse({"state": study.state, "html": {"live": html}, "at": timezone.now().isoformat()})


@researcher_required
@require_POST
def study_action(request, study_id: int, action: str):
    """publish (or launch / resume on the platform), pause, close, sync; owner only. The message says what
    happened, or exactly what is missing."""
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    try:
        if action == "publish":
            outcome = launch_services.study_go_live(study_id=study.pk)
        elif action in ("pause", "close"):
            outcome = launch_services.study_halt(study_id=study.pk, close=action == "close")
        elif action == "sync":
            outcome = launch_services.study_sync_request(study_id=study.pk)
        else:
            raise Http404(f"unknown action {action!r}")
    except (study_services.StudyStateError, launch_services.LaunchRefused) as error:
        messages.error(request, str(error))
    except PlatformError as error:
        state = Study.objects.get(pk=study.pk).state
        where = get_adapter(study.platform).name
        if action == "publish" and state == Study.State.PUBLISHED:
            tail = (
                f"The study is published here but not live on {where} yet: fix this, then press “Finish the "
                "launch” (safe to repeat: what exists is not created twice)."
            )
        elif action == "publish":
            tail = f"Nothing was launched; the study is still {state}."
        else:
            tail = f"The study is {state}."
        messages.error(request, f"{where}: {error} {tail}")
    else:
        messages.success(request, outcome)
    return redirect("researcher:study_detail", study_id=study.pk)


@csrf_exempt  # writes nothing: it answers a question about the study's own masks (see the docstring)
@researcher_json
@require_POST
def preview_check(request, study_id: int):
    """``POST {target_id, x, y}`` (canonical image px) → ``{valid, distance_px, radius_px, reason, message}``:
    would this click count? The preview player asks it after each click.

    Needs the researcher's login (401/403/404 as JSON otherwise). CSRF-exempt on purpose: it changes
    nothing, and its answer cannot be read by another site (no CORS), so a forged request gains nothing;
    the player page need not carry a CSRF token for it."""
    try:
        study = study_visible_or_404(user=request.user, study_id=study_id)
    except Http404:
        return error_response(404, "not_found", f"study {study_id} does not exist or is not shared with you.")
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return error_response(400, "invalid_json", "the body must be JSON: {target_id, x, y}.")
    if not isinstance(data, dict):
        return error_response(400, "invalid_json", "the body must be a JSON object: {target_id, x, y}.")
    target_id = data.get("target_id")
    if not isinstance(target_id, int) or isinstance(target_id, bool):
        return error_response(
            400, "invalid", f"target_id={target_id!r} must be an integer.", field="target_id"
        )
    coordinates = {}
    for name in ("x", "y"):
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return error_response(
                400, "invalid", f"{name}={value!r} must be a finite number (image px).", field=name
            )
        coordinates[name] = float(value)
    target = (
        Target.objects.select_related("instance__image", "round__study")
        .filter(pk=target_id, round__study=study)
        .first()
    )
    if target is None:
        return error_response(
            404, "not_found", f"target {target_id} is not part of study {study.pk}.", field="target_id"
        )
    try:
        verdict = preview_click_check(target=target, **coordinates)
    except MaskMissing as error:
        return error_response(500, "mask_missing", str(error))
    return JsonResponse(verdict)


@researcher_required
@require_GET
def study_chart(request, study_id: int, kind: str):
    study = study_visible_or_404(user=request.user, study_id=study_id)
    if kind not in pictures.CHART_KINDS:
        raise Http404(f"chart {kind!r} is unknown")
    return HttpResponse(
        pictures.study_chart(study=study, kind=kind), content_type="image/png", headers=PNG_HEADERS
    )


@researcher_required
def target_list(request, study_id: int):
    study = study_visible_or_404(user=request.user, study_id=study_id)
    targets = target_selectors.study_targets(study=study)
    return render(request, "researcher/target_list.html", {"study": study, "targets": targets})


def _target_or_404(study, target_id: int) -> Target:
    try:
        return target_selectors.study_target_get(study=study, target_id=target_id)
    except Target.DoesNotExist:
        raise Http404(f"target {target_id} is not part of study {study.pk}") from None


@researcher_required
def target_detail(request, study_id: int, target_id: int):
    study = study_visible_or_404(user=request.user, study_id=study_id)
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
    study = study_visible_or_404(user=request.user, study_id=study_id)
    target = _target_or_404(study, target_id)
    return HttpResponse(pictures.target_heatmap(target=target), content_type="image/png", headers=PNG_HEADERS)


@researcher_required
@require_GET
def study_quality(request, study_id: int):
    """A corrective campaign's quality ranking (Mr, seed 001 §4.2): every finished instance by estimated quality,
    beside its true IoU, with how Mr was trained, how well it ranks and whether to trust it; the zip download
    keeping the top N %."""
    study = study_visible_or_404(user=request.user, study_id=study_id)
    if not study.is_corrective:
        raise Http404(
            f"study {study.pk} is a {study.kind} study; only corrective campaigns have a quality ranking."
        )
    ranking, refused = None, ""
    try:
        ranking = corrective_quality.quality_ranking(study_id=study.pk)
    except corrective_quality.QualityModelError as exc:
        refused = str(exc)
    return render(
        request,
        "researcher/study_quality.html",
        {
            "study": study,
            "ranking": ranking,
            "training": ranking.training() if ranking else None,
            "rows": corrective_quality.ranking_rows(ranking) if ranking else [],
            "refused": refused,
            "default_top_percent": DEFAULT_TOP_PERCENT,
        },
    )


@researcher_required
def worker_table(request, study_id: int):
    study = study_visible_or_404(user=request.user, study_id=study_id)
    return render(
        request, "researcher/worker_table.html", {"study": study, "workers": study_worker_table(study=study)}
    )


@researcher_required
def session_list(request, study_id: int):
    study = study_visible_or_404(user=request.user, study_id=study_id)
    show = request.GET.get("show", "")
    page = Paginator(session_selectors.study_sessions(study=study, show=show), SESSIONS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "researcher/session_list.html",
        {"study": study, "page": page, "show": show, "filters": session_selectors.SESSION_FILTERS},
    )


@researcher_required
def session_detail(request, study_id: int, session_id: int):
    study = study_visible_or_404(user=request.user, study_id=study_id)
    try:
        detail = session_selectors.session_detail(study=study, session_id=session_id)
    except Session.DoesNotExist:
        raise Http404(f"session {session_id} is not part of study {study.pk}") from None
    detail.update({"study": study, "can_change": user_can_change_study(request.user, study)})
    return render(request, "researcher/session_detail.html", detail)


@researcher_required
@require_GET
def session_trial_picture(request, study_id: int, session_id: int, position: int):
    """PNG of one trial of a session (``pictures.trial_picture``): its image, the region outlined, the click.
    Researchers who may see the study only; the picture shows the ground truth, so never to annotators."""
    study = study_visible_or_404(user=request.user, study_id=study_id)
    try:
        trial = pictures.session_trial_get(study=study, session_id=session_id, position=position)
    except Trial.DoesNotExist:
        raise Http404(
            f"session {session_id} of study {study.pk} has no trial at position {position}"
        ) from None
    png = pictures.trial_picture(trial=trial, radius_fraction=study.radius_fraction)
    return HttpResponse(png, content_type="image/png", headers=PNG_HEADERS)


@researcher_required
@require_POST
def session_review(request, study_id: int, session_id: int):
    """Approve or reject a finished session by hand (owner only); recorded with who and when, and sent to
    the platform where it supports it."""
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    if not Session.objects.filter(pk=session_id, study=study).exists():
        raise Http404(f"session {session_id} is not part of study {study.pk}")
    try:
        review = launch_services.session_review(
            session_id=session_id,
            decision=request.POST.get("decision", ""),
            reason=request.POST.get("reason", ""),
            reviewed_by=request.user,
        )
    except launch_services.ReviewRefused as error:
        messages.error(request, str(error))
    else:
        outcome = f" {review.platform_outcome}" if review.platform_outcome else ""
        messages.success(
            request, f"Session {session_id} {review.decision}d by {request.user.get_username()}.{outcome}"
        )
    return redirect("researcher:session_detail", study_id=study.pk, session_id=session_id)


# --- the session monitor and the simulated annotators (issue 32 items 3 and 4) -------------------------------


def _monitor_redirect(study: Study, anchor: str = "monitor"):
    return redirect(reverse("researcher:study_detail", args=[study.pk]) + f"#{anchor}")


@researcher_required
@require_POST
def session_control(request, study_id: int, session_id: int, action: str):
    """Release a running session's unclicked trials (the worker may come back and go on) or expire it now
    (owner only); the message says how many slots were given back."""
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    session = Session.objects.filter(pk=session_id, study=study).first()
    if session is None:
        raise Http404(f"session {session_id} is not part of study {study.pk}")
    who = request.user.get_username()
    if action == "release":
        if session.status != Session.Status.STARTED:
            messages.error(
                request, f"Session {session_id} is {session.status}: only a running session holds slots."
            )
            return _monitor_redirect(study)
        released = reservation_services.session_release(session=session, by="researcher")
        logger.info("session released by a researcher", extra={"session_id": session.pk, "researcher": who})
        if released:
            messages.success(
                request,
                f"Session {session_id} released: {released} unclicked image{'s' if released != 1 else ''} given "
                "back to other workers; the worker may still come back and go on with the batch.",
            )
        else:
            messages.error(
                request,
                f"Session {session_id} held no slot to give back: every trial is clicked or released.",
            )
    elif action == "expire":
        try:
            monitor_services.session_expire_now(
                session_id=session_id, by=monitor_services.ENDED_BY_RESEARCHER
            )
        except monitor_services.MonitorRefused as error:
            messages.error(request, str(error))
            return _monitor_redirect(study)
        messages.success(request, f"Session {session_id} expired by {who}: its slots are free again.")
    else:
        raise Http404(f"unknown session action {action!r}")
    logger.info(
        "session control", extra={"study_id": study.pk, "session_id": session_id, "action": action, "by": who}
    )
    return _monitor_redirect(study)


@researcher_required
@require_POST
def worker_block(request, study_id: int, worker_id: int):
    """Block a worker who took part in the study (owner only): refused from now on, running batches of this
    study expired; the reason goes into the worker's notes."""
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    if not Session.objects.filter(study=study, worker_id=worker_id).exists():
        raise Http404(f"worker {worker_id} has no session in study {study.pk}")
    who = request.user.get_username()
    try:
        expired = monitor_services.worker_block(
            worker_id=worker_id, reason=request.POST.get("reason", ""), by=who, study_id=study.pk
        )
    except monitor_services.MonitorRefused as error:
        messages.error(request, f"Not blocked: {error}")
        return _monitor_redirect(study)
    pseudonym = Session.objects.filter(study=study, worker_id=worker_id).values_list(
        "worker__pseudonym", flat=True
    )[0]
    messages.success(
        request,
        f"Worker {pseudonym} blocked by {who}: they get no new batch"
        + (
            f"; running session{'s' if len(expired) != 1 else ''} {', '.join(map(str, expired))} expired."
            if expired
            else "."
        ),
    )
    logger.info("worker blocked", extra={"study_id": study.pk, "worker_id": worker_id, "by": who})
    return _monitor_redirect(study)


def _share(request, name: str, default: float) -> float:
    raw = request.POST.get(name, "")
    try:
        return float(raw) if raw != "" else default
    except ValueError:
        raise bot_services.BotRunRefused(f"{name}={raw!r}: a share between 0 and 1, e.g. 0.5.") from None


@researcher_required
@require_POST
def study_bots_run(request, study_id: int):
    """Run simulated annotators on a draft (owner only): a Celery worker plays them over HTTP against
    PUBLIC_BASE_URL; the page's "Simulated annotators" card follows them."""
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    raw = request.POST.get("bots", "")
    try:
        if not raw.isascii() or not raw.isdigit() or len(raw) > 4:
            raise bot_services.BotRunRefused(f"bots={raw!r}: how many simulated annotators, a whole number.")
        run = bot_services.bot_run_request(
            study=study,
            bots=int(raw),
            phone_share=_share(request, "phone_share", 0.5),
            leave_share=_share(request, "leave_share", 0.2),
        )
    except bot_services.BotRunRefused as error:
        messages.error(request, f"Simulated annotators not started: {error}")
        return _monitor_redirect(study, "bots")
    messages.success(
        request,
        f"{raw} simulated annotators asked for (run {run}): a worker plays them against {settings.PUBLIC_BASE_URL}; "
        "their verdicts show below as they finish.",
    )
    logger.info("bot run", extra={"study_id": study.pk, "run": run, "by": request.user.get_username()})
    return _monitor_redirect(study, "bots")


@researcher_required
@require_POST
def study_bots_remove(request, study_id: int):
    """Delete every simulated annotator's session, trial, click and worker of the study (owner only)."""
    study = changeable_study_or_403(user=request.user, study_id=study_id)
    counts = bot_services.bots_remove(study_id=study.pk)
    messages.success(
        request,
        f"Simulated data removed: {counts['sessions']} sessions, {counts['trials']} trials, {counts['clicks']} "
        f"clicks, {counts['workers']} bot workers. Quotas untouched (bots never add to them).",
    )
    logger.info(
        "simulated data removed", extra={"study_id": study.pk, "by": request.user.get_username(), **counts}
    )
    return _monitor_redirect(study, "bots")
