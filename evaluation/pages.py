"""Leaderboard pages: the researchers' (every published benchmark's board across participants, their own runs,
keys, display name, the upload of a local run, publishing a benchmark with its protocol), the public read-only
page of a published benchmark, and the page of one run (server or local) with its curves."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from collector.models import Dataset
from collector.researcher.access import researcher_required

from . import boards, publishing, services
from .models import EvaluationKey, EvaluationRun, LocalRun, PublishedBenchmark


@researcher_required
def leaderboard(request):
    benchmarks = PublishedBenchmark.objects.select_related("dataset").order_by("title")
    context = {
        "benchmark_boards": [boards.benchmark_board(benchmark) for benchmark in benchmarks],
        "boards": boards.own_boards(request.user),
        "display_name": publishing.display_name(request.user),
        "open_runs": EvaluationRun.objects.filter(owner=request.user, state__in=services.OPEN_STATES).select_related("dataset"),
        "keys": EvaluationKey.objects.filter(user=request.user, revoked_at__isnull=True).order_by("-created_at"),
        "benchmarks": benchmarks,
        "datasets": Dataset.objects.order_by("name"),
        "click_models": services.REMOTE_CLICK_MODELS,
    }  # fmt: skip
    return render(request, "evaluation/leaderboard.html", context)


@researcher_required
@require_POST
def key_create(request):
    name = request.POST.get("name", "")[:100]
    if not name.isprintable():  # NUL cannot be stored (PostgreSQL); no control character means anything here
        messages.error(request, f"The key name {name!r} holds a control character; use printable characters.")
        return redirect("evaluation_pages:leaderboard")
    _, raw = services.create_key(user=request.user, name=name)
    messages.success(request, f"Your new evaluation key (shown only now, copy it): {raw}")
    return redirect("evaluation_pages:leaderboard")


@researcher_required
@require_POST
def key_revoke(request, key_id: int):
    """Revoke one of your keys; another user's key is a 404, as a key that does not exist."""
    try:
        services.key_revoke(user=request.user, key_id=key_id)
    except services.EvalError as exc:
        raise Http404(exc.message) from None
    messages.info(request, "The key is revoked; requests with it are refused from now on.")
    return redirect("evaluation_pages:leaderboard")


@researcher_required
@require_POST
def rename(request):
    try:
        participant = publishing.participant_rename(
            user=request.user, display_name=request.POST.get("display_name", "")
        )
    except services.EvalError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"You appear on the leaderboards as {participant.display_name!r}.")
    return redirect("evaluation_pages:leaderboard")


@researcher_required
@require_POST
def publish(request):
    dataset = Dataset.objects.filter(pk=request.POST.get("dataset") or 0).first()
    try:
        benchmark = publishing.benchmark_publish(
            user=request.user, dataset=dataset, title=request.POST.get("title", ""),
            # the form's checkboxes (none ticked: none sent); a post without the form's fields: both clickers
            clickers=request.POST.getlist("clickers") if "clickers_shown" in request.POST else publishing.CLICKERS,
            max_clicks=request.POST.get("max_clicks", 20),
            max_time_s=request.POST.get("max_time_s") or None, seed=request.POST.get("seed", 42),
            click_model=request.POST.get("click_model", "dt"), groups=request.POST.get("groups", 10),
        )  # fmt: skip
    except services.EvalError as exc:
        messages.error(request, exc.message)
        return redirect("evaluation_pages:leaderboard")
    messages.success(request, f"Published at /eval/b/{benchmark.slug}/ (read-only, no login). Runs join it with "
                              f"ClickSession(host=..., key=..., benchmark={benchmark.slug!r}).")  # fmt: skip
    return redirect("evaluation_pages:leaderboard")


def _uploaded_json(request, field: str):
    upload = request.FILES.get(field)
    if upload is None:
        return None
    if upload.size > publishing.MAX_SUMMARY_BYTES:
        raise services.EvalError(400, "invalid_local_run",
                                 f"{upload.name} is {upload.size} bytes; a {field}.json is at most {publishing.MAX_SUMMARY_BYTES}.")  # fmt: skip
    try:
        return json.loads(upload.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise services.EvalError(
            400, "invalid_local_run", f"{upload.name} is not a JSON file ({exc})."
        ) from None


@researcher_required
@require_POST
def local_upload(request):
    """The leaderboard's upload of a local run: its summary.json (and timing.json), as ``benchmark publish``."""
    try:
        summary = _uploaded_json(request, "summary")
        if summary is None:
            raise services.EvalError(400, "invalid_local_run", "Choose the run's summary.json to upload.")
        local, created = publishing.local_run_publish(
            user=request.user, key=None, summary=summary, timing=_uploaded_json(request, "timing"),
            benchmark_slug=request.POST.get("benchmark") or None,
        )  # fmt: skip
    except services.EvalError as exc:
        messages.error(request, exc.message)
        return redirect("evaluation_pages:leaderboard")
    where = f"benchmark {local.benchmark.title!r}" if local.benchmark else "your runs"
    verb = "Published" if created else "Already published"
    messages.success(
        request, f"{verb}: {local.method} on {local.dataset_name}, local, unverified, on {where}."
    )
    return redirect("evaluation_pages:leaderboard")


def public_benchmark(request, slug: str):
    benchmark = get_object_or_404(PublishedBenchmark.objects.select_related("dataset"), slug=slug)
    return render(
        request,
        "evaluation/public.html",
        {"benchmark": benchmark, "board": boards.benchmark_board(benchmark)},
    )


def _visible(request, owner_id: int, on_benchmark: bool) -> None:
    """A run's page: anyone's for a run on a published benchmark (public), else its owner's."""
    if on_benchmark:
        return
    if not (request.user.is_authenticated and request.user.pk == owner_id):
        raise Http404("No such run.")


def run_page(request, run_id):
    run = get_object_or_404(EvaluationRun.objects.select_related("dataset", "owner", "benchmark"), pk=run_id)
    _visible(request, run.owner_id, run.benchmark_id is not None)
    if run.state != EvaluationRun.State.FINISHED:
        raise Http404("The run has not finished.")
    runs = list(
        EvaluationRun.objects.filter(owner=run.owner, dataset=run.dataset, state=EvaluationRun.State.FINISHED)
    )
    row = boards.server_row(run, runs)
    return render(request, "evaluation/run.html", {"row": row, "run": run, "board": boards.board(run.dataset.name, [run], []),
                                                   "summary": run.summary or {}})  # fmt: skip


def local_page(request, run_id):
    local = get_object_or_404(LocalRun.objects.select_related("owner", "benchmark"), pk=run_id)
    _visible(request, local.owner_id, local.benchmark_id is not None)
    row = boards.local_row(local)
    return render(request, "evaluation/run.html", {"row": row, "local": local, "board": boards.board(local.dataset_name, [], [local]),
                                                   "summary": local.summary})  # fmt: skip
