"""Reads behind the leaderboards and the run pages: one row per result, server runs ("server, verified": scored
here) and published local runs ("local, unverified": their publisher's figures), ranked by NoC@90; the
mIoU-vs-clicks and mIoU-vs-time plots (inline SVG)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from .models import EvaluationRun, LocalRun, PublishedBenchmark
from .publishing import display_name
from .selectors import baseline_run_for, group_run_statistics

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
SERVER, LOCAL = "server, verified", "local, unverified"


def _number(value, digits=2) -> str:
    if (
        value is None
        or isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
    ):
        return "—"
    return f"{value:.{digits}f}"


def _percent(value) -> str:
    text = _number(value, 1)
    return text if text == "—" else f"{text} %"


def _sort_value(value) -> float:
    return value if isinstance(value, int | float) and math.isfinite(value) else math.inf


def _deltas(run: EvaluationRun, runs: list[EvaluationRun]) -> dict:
    """ΔSB/ΔGR/ΔHH (NoC@90, %; paired ΔHH) of a group run, with the IoU-AuC variants in a tooltip."""
    if run.clicker != "group":
        why = "ΔSB, ΔGR and ΔHH are shown on the method's clicking-group run (clicker='group')"
        return {"dsb": "—", "dgr": "—", "dhh": "—", "delta_title": why}
    stats = group_run_statistics(run, baseline_run_for(run, runs))
    title = "NoC@90-based, in %; IoU-AuC: ΔSB {} · ΔGR {} · ΔHH {}".format(
        _number(stats.get("delta_sb_auc"), 3), _number(stats.get("delta_gr_auc"), 3), _number(stats.get("delta_hh_auc"), 3)
    )  # fmt: skip
    if stats.get("note"):
        title += f". {stats['note']}."
    return {"dsb": _percent(stats.get("delta_sb_noc90")), "dgr": _percent(stats.get("delta_gr_noc90")),
            "dhh": _percent(stats.get("delta_hh_noc90")), "delta_title": title}  # fmt: skip


def server_row(run: EvaluationRun, runs: list[EvaluationRun]) -> dict:
    s = run.summary or {}
    noc, nof = s.get("noc", {}), s.get("nof", {})
    config = f"{run.clicker}"
    if run.clicker == "group":
        config += f" ({run.click_model} map, {len(run.group_bounds)} groups)"
    config += f", {run.max_clicks} clicks, seed {run.seed}" + (
        f", {run.max_time_s:g} s/sample" if run.max_time_s else ""
    )
    return {
        **_deltas(run, runs),
        "kind": "server", "source": SERVER, "verified": True, "participant": display_name(run.owner),
        "method": run.method or "(unnamed)", "noc85": _number(noc.get("85")), "noc90": _number(noc.get("90")),
        "nof85": nof.get("85", "—"), "nof90": nof.get("90", "—"), "auc": _number(s.get("iou_auc"), 3),
        "time_auc": _number(s.get("time_auc"), 3), "spc": _number(s.get("seconds_per_click"), 3),
        "samples": s.get("samples", 0), "config": config, "finished": run.finished_at,
        "provenance": "scored by this server; ground truth never left it",
        "url": f"/eval/runs/{run.pk}/", "curve": s.get("miou_curve") or [],
        "time_curve": s.get("time_curve") or {}, "rank_by": _sort_value(noc.get("90")),
    }  # fmt: skip


def local_row(local: LocalRun) -> dict:
    s, timing, provenance = local.summary, local.timing or {}, local.provenance
    config = s.get("config", {})
    groups = len(config.get("group_bounds") or [])
    parts = (["baseline"] if config.get("run_base", True) else []) + (
        [f"{groups} groups ({s.get('click_model') or '?'} map)"] if groups else []
    )
    hashes = [h or "none (weight-free)" for h in provenance.get("checkpoint_sha256", [])] or ["unknown"]
    base = "base_noc90" in s
    return {
        "kind": "local", "source": LOCAL, "verified": False, "participant": display_name(local.owner),
        "method": local.method, "noc85": _number(s.get("base_noc85" if base else "sample_noc85")),
        "noc90": _number(s.get("base_noc90" if base else "sample_noc90")),
        "nof85": s.get("base_nof85" if base else "sample_nof85", "—"),
        "nof90": s.get("base_nof90" if base else "sample_nof90", "—"),
        "auc": _number(s.get("base_auc" if base else "sample_auc"), 3),
        "dsb": _percent(s.get("delta_sb_noc90")), "dgr": _percent(s.get("delta_gr_noc90")),
        "dhh": _percent(s.get("delta_hh_noc90")),
        "delta_title": "From the publisher's benchmark run (NoC@90, %); IoU-AuC: ΔSB {} · ΔGR {} · ΔHH {}".format(
            _number(s.get("delta_sb_auc"), 3), _number(s.get("delta_gr_auc"), 3), _number(s.get("delta_hh_auc"), 3)),
        "time_auc": _number(timing.get("time_auc_base" if base else "time_auc_sample"), 3),
        "spc": _number(timing.get("seconds_per_click"), 3), "samples": s.get("instances", 0),
        "config": f"{' + '.join(parts) or '?'}, {config.get('max_clicks')} clicks, seed {config.get('seed')}",
        "finished": local.created_at,
        "provenance": f"dataset {provenance.get('dataset_hash')}; checkpoint {', '.join(hashes)}; "
                      f"seed {provenance.get('seed')}; {provenance.get('code_version')}",
        "url": f"/eval/local/{local.pk}/", "curve": s.get("curve_base") or s.get("curve_groups", [[]])[0],
        "time_curve": timing.get("time_curve_base" if base else "time_curve_sample") or {},
        "rank_by": _sort_value(s.get("base_noc90" if base else "sample_noc90")),
    }  # fmt: skip


def board(title: str, runs: Iterable[EvaluationRun], local_runs: Iterable[LocalRun], **extra) -> dict:
    """One leaderboard: its rows ranked by NoC@90 (lower first; undefined last), then by time."""
    runs = list(runs)
    rows = [server_row(run, runs) for run in runs] + [local_row(local) for local in local_runs]
    rows.sort(key=lambda row: (row["rank_by"], -(row["finished"].timestamp() if row["finished"] else 0)))
    return {"dataset": title, "rows": rows, "plot": clicks_plot(rows), "time_plot": time_plot(rows), **extra}


def _finished_runs():
    return EvaluationRun.objects.filter(state=EvaluationRun.State.FINISHED).select_related(
        "dataset", "owner__participant"
    )


def benchmark_board(benchmark: PublishedBenchmark) -> dict:
    """Every participant's finished runs on ``benchmark`` and the local runs published to it."""
    runs = _finished_runs().filter(benchmark=benchmark).order_by("-finished_at")
    local = LocalRun.objects.filter(benchmark=benchmark).select_related("owner__participant")
    return board(benchmark.title, runs, local, benchmark=benchmark)


def own_boards(user) -> list[dict]:
    """``user``'s results outside any benchmark, one board per dataset name."""
    runs = list(_finished_runs().filter(owner=user, benchmark__isnull=True).order_by("-finished_at"))
    local = list(
        LocalRun.objects.filter(owner=user, benchmark__isnull=True).select_related("owner__participant")
    )
    names = sorted({run.dataset.name for run in runs} | {lr.dataset_name for lr in local})
    return [
        board(
            name, [r for r in runs if r.dataset.name == name], [lr for lr in local if lr.dataset_name == name]
        )
        for name in names
    ]


# --------------------------------------------------------------------------------------------------
# plots (inline SVG)


def _svg_frame(label: str, x_label: str, width: int, height: int, pad: int) -> list[str]:
    bottom = height - pad
    return [f'<svg class="miou-plot" viewBox="0 0 {width} {height}" role="img" aria-label="{label}">',
            f'<line x1="{pad}" y1="{bottom}" x2="{width - pad}" y2="{bottom}" stroke="#888"/>',
            f'<line x1="{pad}" y1="{bottom}" x2="{pad}" y2="{pad}" stroke="#888"/>',
            f'<text x="{width / 2}" y="{height - 6}" text-anchor="middle" font-size="12">{x_label}</text>',
            f'<text x="10" y="{pad - 12}" font-size="12">mIoU</text>']  # fmt: skip


def _lines(parts: list[str], series: list[tuple[int, list]], sx, sy, width: int, pad: int) -> str:
    """The y ticks, then one polyline per (row number, [(x, y), ...]), coloured and labelled by the number."""
    for value in (0.0, 0.5, 0.85, 0.9, 1.0):
        parts.append(
            f'<text x="{pad - 4}" y="{sy(value) + 4}" text-anchor="end" font-size="10">{value:g}</text>'
        )
    for i, (number, points) in enumerate(series):
        colour = COLOURS[(number - 1) % len(COLOURS)]
        text = " ".join(f"{sx(x):.1f},{sy(y or 0.0):.1f}" for x, y in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{text}"/>')
        parts.append(
            f'<text x="{width - pad + 2}" y="{pad + 14 * i}" font-size="10" fill="{colour}">{number}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def clicks_plot(rows: list[dict], width=520, height=260, pad=36) -> str:
    """mIoU after k clicks, one line per row (numbered as the table)."""
    curves = [(n, row["curve"]) for n, row in enumerate(rows, 1) if row["curve"]]
    if not curves:
        return ""
    k_max = max(len(c) for _, c in curves)
    sx = lambda k: pad + (width - 2 * pad) * (k - 1) / max(k_max - 1, 1)  # noqa: E731
    sy = lambda v: height - pad - (height - 2 * pad) * v  # noqa: E731
    parts = _svg_frame("mIoU vs clicks", "clicks", width, height, pad)
    for k in sorted({1, k_max, *range(5, k_max + 1, 5)}):
        parts.append(f'<text x="{sx(k)}" y="{sy(0) + 14}" text-anchor="middle" font-size="10">{k}</text>')
    return _lines(parts, [(n, [(k + 1, v) for k, v in enumerate(c)]) for n, c in curves], sx, sy, width, pad)


def time_plot(rows: list[dict], width=520, height=260, pad=36) -> str:
    """mIoU against the method's time (seconds), one line per row that has it (numbered in that order)."""
    curves = [(n, row["time_curve"]) for n, row in enumerate(rows, 1) if row["time_curve"].get("seconds")]
    if not curves:
        return ""
    t_max = max(max(c["seconds"]) for _, c in curves) or 1.0
    sx = lambda t: pad + (width - 2 * pad) * t / t_max  # noqa: E731
    sy = lambda v: height - pad - (height - 2 * pad) * v  # noqa: E731
    parts = _svg_frame("mIoU vs time", "method time (s)", width, height, pad)
    for fraction in (0.0, 0.5, 1.0):
        t = t_max * fraction
        parts.append(f'<text x="{sx(t)}" y="{sy(0) + 14}" text-anchor="middle" font-size="10">{t:.3g}</text>')
    return _lines(parts, [(n, list(zip(c["seconds"], c["miou"]))) for n, c in curves], sx, sy, width, pad)
