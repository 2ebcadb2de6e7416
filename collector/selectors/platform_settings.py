"""What the study page's platform card lists: for each crowd platform, the settings that decide what workers
see and what the platform accepts (a study's ``platform_config`` with its defaults, and what the launch
created there), each as ``{"key", "label", "value", "problem"}``. ``problem`` is a sentence when the
setting, as it stands, stops or spoils the study on that platform ("" otherwise)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings

from collector.models import DEVICES, PlatformCampaign
from collector.models.studies import Platform, Study
from collector.platforms import get_adapter, toloka
from collector.platforms.base import SUBMIT_ALLOWANCE_MIN_S, assignment_time_limit_s
from collector.platforms.prolific import external_study_url


def _row(key: str, label: str, value, problem: str = "", *, url: str = "") -> dict:
    return {"key": key, "label": label, "value": value, "problem": problem, "url": url}


def _days(config: dict, key: str, default: int) -> str:
    return f"{config.get(key, default)} days" + ("" if key in config else " (default)")


def _common(study: Study, config: dict) -> list[dict]:
    devices = config.get("devices")
    fee = config.get("fee_fraction", get_adapter(study.platform).fee_fraction)
    return [
        _row(
            "devices",
            "Devices recruited",
            ", ".join(devices) if devices else "pc and mobile (those with a quota above 0)",
        ),
        _row(
            "max_budget",
            "Budget limit",
            f"{config['max_budget']} {study.currency}" if "max_budget" in config else "none",
        ),
        _row(
            "bonus_per_counted_session",
            "Bonus per counted batch",
            f"{config.get('bonus_per_counted_session', 0)} {study.currency}",
        ),
        _row("fee_fraction", "Platform fee", f"{float(fee):.1%} of rewards and bonuses"),
    ]


def _prolific(study: Study, config: dict, campaign: PlatformCampaign | None) -> list[dict]:
    code = str(config.get("prolific_completion_code", "")).strip()
    study_id = str(config.get("prolific_study_id", "")).strip()
    completion_url = (
        f"{settings.PROLIFIC_COMPLETE_URL}?{urlencode({'cc': code})}"
        if code
        else f"{settings.PROLIFIC_COMPLETE_URL}?cc=<each participant's own code>"
    )
    rows = [
        _row(
            "prolific_completion_code",
            "Completion code",
            code or "not set",
            ""
            if code
            else "Prolific accepts only the completion codes configured on its study: create one there "
            "and enter it here, or the codes workers bring back are not recognised.",
        ),
        _row("completion_url", "Completion URL (where a finished participant is sent)", completion_url),
        _row(
            "prolific_study_id",
            "Prolific study id",
            study_id or "any (entries from every Prolific study are accepted)",
        ),
    ]
    for device in DEVICES:
        if getattr(study, f"quota_{device}"):
            rows.append(
                _row(
                    f"external_url_{device}",
                    f"External study URL ({device})",
                    external_study_url(study_id=study.pk, device=device),
                )
            )
    return rows


def _toloka(study: Study, config: dict, campaign: PlatformCampaign | None) -> list[dict]:
    base = settings.TOLOKA_API_URL
    rows = []
    if campaign and campaign.external_project_id:
        project = campaign.external_project_id
        rows.append(_row("project", "Project", project, url=f"{base}/requester/project/{project}"))
        for pool in campaign.pools.all():
            if pool.external_id:
                rows.append(
                    _row(
                        f"pool_{pool.device}",
                        f"Pool ({pool.device})",
                        f"{pool.external_id} ({pool.external_status or 'status unknown'})",
                        url=f"{base}/requester/project/{project}/pool/{pool.external_id}",
                    )
                )
        if campaign.external_skill_id:
            rows.append(
                _row(
                    "skill",
                    "Skill “did this study” (keeps workers from repeating)",
                    campaign.external_skill_id,
                )
            )
    else:
        rows.append(_row("project", "Project and pools", "created by the launch"))
    rows += [
        _row("public_name", "Title workers see", config.get("public_name", "Click on objects in images")),
        _row(
            "languages",
            "Worker languages",
            ", ".join(config["languages"]) if config.get("languages") else "any",
        ),
        _row("browser_only", "Browser only (no Toloka app)", "yes" if config.get("browser_only") else "no"),
        _row("task_suites_per_pool", "Task suites per pool", config.get("task_suites_per_pool", 1)),
        _row("pool_days", "Pools open for", _days(config, "pool_days", 30)),
        _row("review_days", "Accepted by Toloka after", _days(config, "review_days", 7)),
        _time_limit(study, config, platform="Toloka"),
        _row(
            "currency",
            "Currency of the reward",
            study.currency,
            ""
            if study.currency == toloka.CURRENCY
            else f"Toloka pays in {toloka.CURRENCY} and would read {study.reward_per_batch} as dollars; the launch "
            "refuses the study.",
        ),
    ]
    return rows


def _time_limit(study: Study, config: dict, *, platform: str) -> dict:
    """The platform assignment's time limit: the session's timeout and the time left to submit."""
    limit = assignment_time_limit_s(study=study)
    spare = limit - study.session_timeout_s
    problem = ""
    if spare < SUBMIT_ALLOWANCE_MIN_S:
        problem = (
            f"A worker whose batch ends at the session timeout has {max(spare, 0)} s to submit it; the "
            f"launch refuses less than {SUBMIT_ALLOWANCE_MIN_S} s."
        )
    source = "" if "assignment_max_duration_s" in config else " (default)"
    return _row(
        "assignment_max_duration_s",
        f"Time a worker has for the {platform} task",
        f"{limit} s{source}: the batch's {study.session_timeout_s} s, then {spare} s to submit",
        problem,
    )


def _mturk(study: Study, config: dict, campaign: PlatformCampaign | None) -> list[dict]:
    rows = [
        _row(
            "environment",
            "Marketplace",
            "sandbox (no real money)" if settings.MTURK_SANDBOX else "production",
        )
    ]
    pools = list(campaign.pools.all()) if campaign else []
    for pool in pools:
        sent = pool.settings_sent or {}
        rows.append(
            _row(
                f"hit_{pool.device}",
                f"HIT ({pool.device})",
                f"{pool.external_id or 'not created yet'} ({pool.external_status or 'status unknown'}), "
                f"{sent.get('MaxAssignments', pool.assignments_planned)} assignments at "
                f"{sent.get('Reward', pool.reward_per_assignment)} USD",
            )
        )
    if not pools:
        rows.append(_row("hits", "HITs", "created by the launch, one per device"))
    if campaign and campaign.external_skill_id:
        rows.append(_row("qualification", "Qualification “did this study”", campaign.external_skill_id))
    rows += [
        _row("public_name", "HIT title", config.get("public_name", "Click on objects in images …")),
        _row("pool_days", "HITs open for", _days(config, "pool_days", 30)),
        _row("review_days", "Approved automatically after", _days(config, "review_days", 7)),
        _time_limit(study, config, platform="MTurk"),
        _row(
            "frame_height_px",
            "Frame height",
            f"{config.get('frame_height_px', 0)} px (0: MTurk's full height)",
        ),
    ]
    return rows


_PLATFORM_ROWS = {Platform.PROLIFIC: _prolific, Platform.TOLOKA: _toloka, Platform.MTURK: _mturk}


def study_platform_settings(*, study: Study) -> list[dict]:
    """The settings that matter on the study's crowd platform, then those of every platform (devices,
    budget limit, bonus, fee); [] for standalone links."""
    rows_of = _PLATFORM_ROWS.get(study.platform)
    if rows_of is None:
        return []
    config = study.platform_config or {}
    campaign = PlatformCampaign.objects.filter(study=study).prefetch_related("pools").first()
    return rows_of(study, config, campaign) + _common(study, config)
