"""Quality signals of a session, as reasons a researcher can read (stored in ``Session.quality_flags``).

Signals never change a click's validity by themselves (interrupted trials already do, through
``Trial.flags``); they are evidence for the researcher's accept/reject decision. Each is a dict
``{"code": ..., "detail": ...}``; codes are stable for filtering, details are sentences.

Codes: ``blocked_clicks``, ``fast_reaction``, ``tab_hidden``, ``focus_lost``, ``viewport_changed``,
``trial_flag`` (any other player flag), ``identical_positions``, ``webdriver``, ``device_mismatch``,
``two_devices``, ``concurrent_sessions``.
"""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Max
from django.db.models.functions import Coalesce
from django.utils import timezone

from collector.models import Session, Trial

#: Relative position tolerance (fraction of the image side) under which two clicks count as identical.
IDENTICAL_POSITION_TOLERANCE = 0.0025
#: Clicks at one identical relative position, in different trials, that raise the flag.
IDENTICAL_POSITION_MIN_TRIALS = 3

# The player reports interruptions as free-form flag names; these keywords map them to our codes.
_FLAG_KEYWORDS = (
    ("tab_hidden", ("hidden", "visibility", "tab")),
    ("focus_lost", ("blur", "focus")),
    ("viewport_changed", ("resize", "viewport", "orientation", "zoom", "fullscreen")),
)


def _flag_code(flag: str) -> str:
    lowered = flag.lower()
    for code, keywords in _FLAG_KEYWORDS:
        if any(keyword in lowered for keyword in keywords):
            return code
    return "trial_flag"


def _trials_text(positions: list[int]) -> str:
    return ", ".join(str(position + 1) for position in sorted(positions))


def _click_of(trial: Trial):
    return getattr(trial, "click", None)


def trial_signals(*, trials: list[Trial], min_reaction_ms: float) -> list[dict]:
    """Signals visible in the trials themselves (blocked clicks, fast reactions, interruptions, identical
    positions). ``trials``: with ``click`` and ``target__instance__image`` selected; positions are
    reported 1-based, as the worker saw them."""
    return [
        *_blocked_click_flags(trials),
        *_fast_reaction_flags(trials, min_reaction_ms=min_reaction_ms),
        *_player_flags(trials),
        *_identical_position_flags(trials),
    ]


def _blocked_click_flags(trials: list[Trial]) -> list[dict]:
    blocked = {t.position: t.blocked_clicks for t in trials if t.blocked_clicks}
    if not blocked:
        return []
    return [
        {
            "code": "blocked_clicks",
            "detail": f"{sum(blocked.values())} click(s) tried while clicking was blocked (phases A-C), "
            f"in trial(s) {_trials_text(list(blocked))}.",
        }
    ]


def _fast_reaction_flags(trials: list[Trial], *, min_reaction_ms: float) -> list[dict]:
    fast = {
        t.position: _click_of(t).reaction_ms
        for t in trials
        if _click_of(t) is not None
        and _click_of(t).reaction_ms is not None
        and _click_of(t).reaction_ms < min_reaction_ms
    }
    if not fast:
        return []
    listed = ", ".join(f"trial {p + 1}: {ms:.0f} ms" for p, ms in sorted(fast.items()))
    return [
        {
            "code": "fast_reaction",
            "detail": f"{len(fast)} click(s) came sooner than {min_reaction_ms:.0f} ms after clicking was "
            f"enabled ({listed}).",
        }
    ]


def _player_flags(trials: list[Trial]) -> list[dict]:
    """The player's interruption reports, one flag per code, in a fixed code order."""
    by_code: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for trial in trials:
        for flag in trial.flags or []:
            by_code[_flag_code(str(flag))][str(flag)].append(trial.position)
    flags: list[dict] = []
    for code in ("tab_hidden", "focus_lost", "viewport_changed", "trial_flag"):
        if code in by_code:
            parts = "; ".join(
                f"{name} in trial(s) {_trials_text(pos)}" for name, pos in by_code[code].items()
            )
            flags.append({"code": code, "detail": f"the player reported {parts}."})
    return flags


def _identical_position_flags(trials: list[Trial]) -> list[dict]:
    """Clicks at the same relative place (within IDENTICAL_POSITION_TOLERANCE) of at least
    IDENTICAL_POSITION_MIN_TRIALS different images: each joins the first group whose first click it matches."""
    groups: list[list[tuple[int, float, float]]] = []
    for trial in trials:
        click = _click_of(trial)
        if click is None:
            continue
        image = trial.target.instance.image
        point = (trial.position, click.x / image.width, click.y / image.height)
        for group in groups:
            _, gx, gy = group[0]
            if (
                abs(gx - point[1]) <= IDENTICAL_POSITION_TOLERANCE
                and abs(gy - point[2]) <= IDENTICAL_POSITION_TOLERANCE
            ):
                group.append(point)
                break
        else:
            groups.append([point])
    flags: list[dict] = []
    for group in groups:
        if len(group) >= IDENTICAL_POSITION_MIN_TRIALS:
            _, gx, gy = group[0]
            flags.append(
                {
                    "code": "identical_positions",
                    "detail": f"{len(group)} clicks at the same place of different images "
                    f"({100 * gx:.1f}% across, {100 * gy:.1f}% down) in trials "
                    f"{_trials_text([p for p, _, _ in group])}.",
                }
            )
    return flags


def session_signals(*, session: Session) -> list[dict]:
    """Signals about the session and the worker's other sessions (webdriver, device disagreement, two
    devices in the study, overlapping sessions in any study)."""
    flags: list[dict] = []
    info = session.client_info or {}
    if info.get("webdriver"):
        flags.append(
            {"code": "webdriver", "detail": "the browser reported navigator.webdriver = true (automation)."}
        )
    claimed = {
        "session": session.device,
        "platform": session.platform_device,
        "browser": session.detected_device,
    }
    said = {name: value for name, value in claimed.items() if value}
    if len(set(said.values())) > 1:
        flags.append(
            {
                "code": "device_mismatch",
                "detail": "devices disagree: "
                + ", ".join(f"{name} said {value}" for name, value in said.items())
                + ".",
            }
        )

    others = Session.objects.filter(worker_id=session.worker_id).exclude(pk=session.pk)
    other_devices = sorted(
        set(
            others.filter(study_id=session.study_id)
            .exclude(device=session.device)
            .values_list("device", flat=True)
        )
    )
    if other_devices:
        flags.append(
            {
                "code": "two_devices",
                "detail": f"the same worker also took batches of this study on {', '.join(other_devices)} "
                f"(this one: {session.device}).",
            }
        )

    # A session is "active" from its start to its finish, or to its last click if it never finished
    # (an abandoned batch stops being active when the worker stopped clicking), or to now if it runs.
    now = timezone.now()
    end = session.finished_at or now
    overlapping = [
        other
        for other in others.filter(started_at__lt=end).annotate(
            last_click_at=Coalesce(Max("trials__click__received_at"), "started_at")
        )
        if (other.finished_at or (now if other.status == Session.Status.STARTED else other.last_click_at))
        > session.started_at
    ]
    if overlapping:
        listed = ", ".join(f"session {o.pk} (study {o.study_id}, {o.device})" for o in overlapping)
        flags.append(
            {
                "code": "concurrent_sessions",
                "detail": f"the same worker ran other sessions at the same time: {listed}.",
            }
        )
    return flags


def session_quality_flags(*, session: Session, trials: list[Trial]) -> list[dict]:
    """Every quality signal of ``session`` (see the module docstring), trial signals first."""
    return trial_signals(trials=trials, min_reaction_ms=session.study.min_reaction_ms) + session_signals(
        session=session
    )
