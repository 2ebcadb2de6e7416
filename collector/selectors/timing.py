"""Timing data of a study for the pictures: reaction times, measured phase durations, pc vs mobile.

Phase onsets are the player's rAF timestamps (``Trial.phase_onsets_ms``: ``{"A": ms, "B": ms, "C": ms,
"D": ms}``, performance.now() on the session clock); a phase's measured duration is the next phase's
onset minus its own. Phase D lasts until the click, so it has no duration here (its length is the
reaction time).
"""

from __future__ import annotations

import numpy as np

from collector.models import DEVICES, Click, Session, Study, Trial

PHASES = ("A", "B", "C", "D")


def study_nominal_phase_ms(*, study: Study) -> dict[str, int]:
    """The durations the study asks for, ms, by phase letter (A image, B target, C blocked)."""
    return {"A": study.image_ms, "B": study.phase_b_ms(), "C": study.blocked_ms}


def phase_durations_from_onsets(onsets: dict | None) -> dict[str, float]:
    """Measured durations (ms) of phases A-C from one trial's onsets; phases whose onset or the next
    one is missing (or not a number) are left out. Keys may be upper- or lower-case letters."""
    if not isinstance(onsets, dict):
        return {}
    by_letter = {}
    for key, value in onsets.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            by_letter[str(key).upper()] = float(value)
    durations = {}
    for phase, following in zip(PHASES[:-1], PHASES[1:], strict=True):
        if phase in by_letter and following in by_letter:
            durations[phase] = by_letter[following] - by_letter[phase]
    return durations


def study_phase_durations_ms(*, study: Study) -> dict[str, dict[str, np.ndarray]]:
    """``{phase: {device: float64 array of measured durations (ms)}}`` for phases A-C."""
    collected: dict[str, dict[str, list[float]]] = {p: {d: [] for d in DEVICES} for p in PHASES[:-1]}
    rows = Trial.objects.filter(
        session__study=study, role=Trial.Role.TASK, session__is_bot=False
    ).values_list("session__device", "phase_onsets_ms")
    for device, onsets in rows:
        for phase, duration in phase_durations_from_onsets(onsets).items():
            collected[phase].setdefault(device, []).append(duration)
    return {
        phase: {device: np.asarray(values, dtype=np.float64) for device, values in by_device.items()}
        for phase, by_device in collected.items()
    }


def study_reaction_ms(*, study: Study) -> dict[str, np.ndarray]:
    """Reaction times (ms from the onset of phase D to the click) by device, float64 arrays."""
    values: dict[str, list[float]] = {device: [] for device in DEVICES}
    rows = Click.objects.filter(
        trial__session__study=study,
        trial__role=Trial.Role.TASK,
        reaction_ms__isnull=False,
        trial__session__is_bot=False,
    ).values_list("trial__session__device", "reaction_ms")
    for device, reaction_ms in rows:
        values.setdefault(device, []).append(reaction_ms)
    return {device: np.asarray(v, dtype=np.float64) for device, v in values.items()}


def study_device_comparison(*, study: Study) -> dict[str, dict]:
    """pc vs mobile: ``sessions``, ``counted_rate`` (counted / validated sessions), ``clicks``,
    ``valid_rate`` (valid / validated clicks), ``median_reaction_ms``, ``median_distance_px`` (of
    invalid clicks to the region). Rates are None when there is nothing to divide."""
    result = {}
    reactions = study_reaction_ms(study=study)
    for device in DEVICES:
        sessions = Session.objects.filter(study=study, device=device, is_bot=False)
        n_sessions = sessions.count()
        validated = sessions.exclude(validity=Session.Validity.PENDING)
        n_validated = validated.count()
        n_counted = validated.filter(validity=Session.Validity.COUNTED).count()
        clicks = Click.objects.filter(
            trial__session__study=study,
            trial__session__device=device,
            trial__role=Trial.Role.TASK,
            trial__session__is_bot=False,
        )
        n_clicks = clicks.count()
        n_judged = clicks.filter(is_valid__isnull=False).count()
        n_valid = clicks.filter(is_valid=True).count()
        distances = np.asarray(
            clicks.filter(is_valid=False, distance_px__isnull=False).values_list("distance_px", flat=True),
            dtype=np.float64,
        )
        device_reactions = reactions.get(device, np.zeros(0))
        result[device] = {
            "sessions": n_sessions,
            "counted_rate": (n_counted / n_validated) if n_validated else None,
            "clicks": n_clicks,
            "valid_rate": (n_valid / n_judged) if n_judged else None,
            "median_reaction_ms": float(np.median(device_reactions)) if device_reactions.size else None,
            "median_distance_px": float(np.median(distances)) if distances.size else None,
        }
    return result
