"""Leaderboard pages: the researcher's own (keys, runs per method and benchmark, mIoU-vs-clicks plot,
publishing) and the public read-only page of a published benchmark."""

from __future__ import annotations

import math

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.text import slugify
from django.views.decorators.http import require_POST

from collector.models import Dataset
from collector.researcher.access import researcher_required

from . import selectors, services
from .models import EvaluationKey, EvaluationRun, PublishedBenchmark

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _number(value, digits=2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.{digits}f}"


def _percent(value) -> str:
    text = _number(value, 1)
    return text if text == "—" else f"{text} %"


def _deltas(run: EvaluationRun, runs: list[EvaluationRun]) -> dict:
    """ΔSB/ΔGR/ΔHH (NoC@90, %; paired ΔHH) of a group run, with the IoU-AuC variants in a tooltip."""
    if run.clicker != "group":
        why = "ΔSB, ΔGR and ΔHH are shown on the method's clicking-group run (clicker='group')"
        return {"dsb": "—", "dgr": "—", "dhh": "—", "delta_title": why}
    stats = selectors.group_run_statistics(run, selectors.baseline_run_for(run, runs))
    title = "NoC@90-based, in %; IoU-AuC: ΔSB {} · ΔGR {} · ΔHH {}".format(
        _number(stats.get("delta_sb_auc"), 3), _number(stats.get("delta_gr_auc"), 3), _number(stats.get("delta_hh_auc"), 3)
    )  # fmt: skip
    if stats.get("note"):
        title += f". {stats['note']}."
    return {"dsb": _percent(stats.get("delta_sb_noc90")), "dgr": _percent(stats.get("delta_gr_noc90")),
            "dhh": _percent(stats.get("delta_hh_noc90")), "delta_title": title}  # fmt: skip


def _row(run: EvaluationRun, runs: list[EvaluationRun]) -> dict:
    s = run.summary or {}
    noc, nof = s.get("noc", {}), s.get("nof", {})
    return {
        **_deltas(run, runs),
        "run": run, "method": run.method or "(unnamed)", "noc85": _number(noc.get("85")), "noc90": _number(noc.get("90")),
        "nof85": nof.get("85", "—"), "nof90": nof.get("90", "—"), "auc": _number(s.get("iou_auc"), 3),
        "spc": _number(s.get("seconds_per_click"), 3), "samples": s.get("samples", 0),
        "server_s": _number(run.server_seconds, 1), "curve": s.get("miou_curve") or [],
        "wall_s": _number((run.finished_at - run.created_at).total_seconds(), 1) if run.finished_at else "—",
    }  # fmt: skip


def _plot(rows: list[dict], width=520, height=260, pad=36) -> str:
    """Inline SVG: mIoU after k clicks, one line per run."""
    curves = [r for r in rows if r["curve"]]
    if not curves:
        return ""
    k_max = max(len(r["curve"]) for r in curves)
    sx = lambda k: pad + (width - 2 * pad) * (k - 1) / max(k_max - 1, 1)  # noqa: E731
    sy = lambda v: height - pad - (height - 2 * pad) * v  # noqa: E731
    parts = [f'<svg class="miou-plot" viewBox="0 0 {width} {height}" role="img" aria-label="mIoU vs clicks">',
             f'<line x1="{pad}" y1="{sy(0)}" x2="{width - pad}" y2="{sy(0)}" stroke="#888"/>',
             f'<line x1="{pad}" y1="{sy(0)}" x2="{pad}" y2="{sy(1)}" stroke="#888"/>',
             f'<text x="{width / 2}" y="{height - 6}" text-anchor="middle" font-size="12">clicks</text>',
             f'<text x="10" y="{pad - 12}" font-size="12">mIoU</text>']  # fmt: skip
    for value in (0.0, 0.5, 0.85, 0.9, 1.0):
        parts.append(
            f'<text x="{pad - 4}" y="{sy(value) + 4}" text-anchor="end" font-size="10">{value:g}</text>'
        )
    for k in sorted({1, k_max, *range(5, k_max + 1, 5)}):
        parts.append(f'<text x="{sx(k)}" y="{sy(0) + 14}" text-anchor="middle" font-size="10">{k}</text>')
    for i, row in enumerate(curves):
        points = " ".join(f"{sx(k + 1):.1f},{sy(v or 0.0):.1f}" for k, v in enumerate(row["curve"]))
        colour = COLOURS[i % len(COLOURS)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>')
        parts.append(
            f'<text x="{width - pad + 2}" y="{pad + 14 * i}" font-size="10" fill="{colour}">{i + 1}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _boards(runs) -> list[dict]:
    runs = list(runs)
    boards: dict[str, list] = {}
    for run in runs:
        boards.setdefault(run.dataset.name, []).append(_row(run, runs))
    return [{"dataset": name, "rows": rows, "plot": _plot(rows)} for name, rows in sorted(boards.items())]


@researcher_required
def leaderboard(request):
    runs = EvaluationRun.objects.filter(
        owner=request.user, state=EvaluationRun.State.FINISHED
    ).select_related("dataset")
    context = {
        "boards": _boards(runs.order_by("dataset__name", "-finished_at")),
        "open_runs": EvaluationRun.objects.filter(owner=request.user, state__in=services.OPEN_STATES).select_related("dataset"),
        "keys": EvaluationKey.objects.filter(user=request.user, revoked_at__isnull=True).order_by("-created_at"),
        "published": PublishedBenchmark.objects.filter(owner=request.user).select_related("dataset"),
        "datasets": Dataset.objects.order_by("name"),
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
    services.key_revoke(user=request.user, key_id=key_id)
    messages.info(request, "The key is revoked; requests with it are refused from now on.")
    return redirect("evaluation_pages:leaderboard")


@researcher_required
@require_POST
def publish(request):
    dataset = Dataset.objects.filter(pk=request.POST.get("dataset") or 0).first()
    title = request.POST.get("title", "").strip()[:200]
    if dataset is None or not title:
        messages.error(request, "Publishing needs a dataset and a title; choose both and try again.")
        return redirect("evaluation_pages:leaderboard")
    base = slugify(title)[:60] or "benchmark"
    slug, n = base, 1
    while PublishedBenchmark.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    PublishedBenchmark.objects.create(slug=slug, title=title, dataset=dataset, owner=request.user)
    messages.success(request, f"Published at /eval/b/{slug}/ (read-only, no login).")
    return redirect("evaluation_pages:leaderboard")


def public_benchmark(request, slug: str):
    benchmark = get_object_or_404(PublishedBenchmark.objects.select_related("dataset"), slug=slug)
    runs = EvaluationRun.objects.filter(
        owner=benchmark.owner, dataset=benchmark.dataset, state=EvaluationRun.State.FINISHED
    ).select_related("dataset")
    boards = _boards(runs.order_by("-finished_at"))
    return render(request, "evaluation/public.html", {"benchmark": benchmark, "boards": boards})
