"""The pseudonymous worker table of a study, with quality signals.

Workers appear only by pseudonym: the platform's id (``Worker.external_id``) never leaves this module's
queries.
"""

from __future__ import annotations

import numpy as np
from django.db.models import Count, Q, Sum

from collector.models import Click, Session, Study, Trial, Worker


def study_worker_table(*, study: Study) -> list[dict]:
    """One row per worker who started a session of ``study``, most sessions first.

    Columns: ``pseudonym``, ``excluded``, ``devices`` (sorted list), ``sessions``, ``finished``,
    ``counted``, ``rejected``, ``clicks``, ``judged_clicks`` (clicks the validation has judged),
    ``pending_clicks`` (not judged yet), ``valid_clicks``, ``valid_rate`` (valid / judged, 0..1, or None
    while nothing is judged: a click waiting for validation is neither valid nor invalid),
    ``median_reaction_ms``, ``fast_clicks`` (reaction below ``study.min_reaction_ms``),
    ``blocked_clicks`` (clicks tried during phases A-C), ``flagged_trials``, ``quality_flags`` (codes of
    the sessions' flags with counts)."""
    in_study = Q(
        sessions__study=study, sessions__is_bot=False
    )  # simulated annotators: the study page's own card
    workers = (
        Worker.objects.filter(sessions__study=study, sessions__is_bot=False)
        .distinct()
        .annotate(
            n_sessions=Count("sessions", filter=in_study, distinct=True),
            n_finished=Count(
                "sessions", filter=in_study & Q(sessions__status=Session.Status.FINISHED), distinct=True
            ),
            n_counted=Count(
                "sessions", filter=in_study & Q(sessions__validity=Session.Validity.COUNTED), distinct=True
            ),
            n_rejected=Count(
                "sessions", filter=in_study & Q(sessions__validity=Session.Validity.REJECTED), distinct=True
            ),
        )
        .order_by("-n_sessions", "pseudonym")
    )
    rows = {
        worker.pk: {
            "pseudonym": worker.pseudonym,
            "excluded": worker.excluded,
            "devices": set(),
            "sessions": worker.n_sessions,
            "finished": worker.n_finished,
            "counted": worker.n_counted,
            "rejected": worker.n_rejected,
            "clicks": 0,
            "judged_clicks": 0,
            "pending_clicks": 0,
            "valid_clicks": 0,
            "valid_rate": None,
            "median_reaction_ms": None,
            "fast_clicks": 0,
            "blocked_clicks": 0,
            "flagged_trials": 0,
            "quality_flags": {},
        }
        for worker in workers
    }
    sessions = Session.objects.filter(study=study, is_bot=False).values_list(
        "worker_id", "device", "quality_flags"
    )
    for worker_id, device, flags in sessions:
        row = rows[worker_id]
        row["devices"].add(device)
        for flag in flags or []:
            code = str(flag.get("code") if isinstance(flag, dict) else flag)
            row["quality_flags"][code] = row["quality_flags"].get(code, 0) + 1
    trial_stats = (
        Session.objects.filter(study=study, is_bot=False)
        .values("worker_id")
        .annotate(blocked=Sum("trials__blocked_clicks"))
    )
    for stat in trial_stats:
        rows[stat["worker_id"]]["blocked_clicks"] = stat["blocked"] or 0
    for worker_id, flags in Trial.objects.filter(session__study=study, session__is_bot=False).values_list(
        "session__worker_id", "flags"
    ):
        if flags:
            rows[worker_id]["flagged_trials"] += 1
    reactions = _add_click_counts(rows, study=study)
    for worker_id, row in rows.items():
        row["devices"] = sorted(row["devices"])
        if row["judged_clicks"]:
            row["valid_rate"] = row["valid_clicks"] / row["judged_clicks"]
        if worker_id in reactions:
            row["median_reaction_ms"] = float(np.median(reactions[worker_id]))
    return list(rows.values())


def _add_click_counts(rows: dict[int, dict], *, study: Study) -> dict[int, list[float]]:
    """Count each worker's clicks into ``rows`` (``clicks``, ``pending_clicks``, ``judged_clicks``,
    ``valid_clicks``, ``fast_clicks``); returns their reaction times (ms) by worker id."""
    reactions: dict[int, list[float]] = {}
    for worker_id, is_valid, reaction_ms in Click.objects.filter(
        trial__session__study=study, trial__session__is_bot=False
    ).values_list("trial__session__worker_id", "is_valid", "reaction_ms"):
        row = rows[worker_id]
        row["clicks"] += 1
        if is_valid is None:
            row["pending_clicks"] += 1
        else:
            row["judged_clicks"] += 1
            row["valid_clicks"] += 1 if is_valid else 0
        if reaction_ms is not None:
            reactions.setdefault(worker_id, []).append(reaction_ms)
            if reaction_ms < study.min_reaction_ms:
                row["fast_clicks"] += 1
    return reactions
