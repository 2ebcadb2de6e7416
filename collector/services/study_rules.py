"""Rules a study's settings must meet before it is created, checked against its dataset.

The study form (``collector.researcher.forms.StudyForm``) and the researcher API's serializer run the same
rules. Each rule is one function ``rule(values, dataset) -> [(field, message)]`` that looks only at the
values it needs (``values``: the cleaned form fields; a missing value means that field already has its own
error, so the rule stays silent); ``dataset`` is the chosen Dataset or None. A message names the field
by its label, the value at fault and what to do. Add a rule by writing a function and listing it in
``STUDY_RULES``, then in ``RULES_BY_KIND`` for each study kind it applies to.

Rules per kind (issue 34): a corrective campaign has no timed phases, no display mode and no valid-click rule (its
sessions count when every instance is done), so the phases, Text Description and 7-of-10 rules are the timed
study's only; its session must leave time for R rounds per instance instead (``rule_campaign_timeout_fits``).
Settings of the other kind are kept as they are, unjudged.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from collector.models import Dataset, DisplayMode, Image, Instance
from collector.models.studies import Platform, StudyKind

Problem = tuple[str, str]
Rule = Callable[[dict, Dataset | None], list[Problem]]

#: Phase durations (ms): shorter than a few frames is not a phase; longer than 10 s is not what RClicks
#: measures (1.5 / 2 / 1.5 s) and makes a batch drag.
PHASE_MS_RANGE = (100, 10_000)
PHASE_LABELS = {
    "image_ms": "Phase A: image",
    "target_ms": "Phase B: target",
    "text_ms": "Phase B in Text Description mode",
    "blocked_ms": "Phase C: image, clicking blocked",
}
#: Seconds a worker needs per trial beyond the timed phases (loading, finding the object, clicking).
CLICK_ALLOWANCE_S = 10
#: Seconds a corrective campaign's worker needs per round of an instance: seed 001's annotators took 10.8-11.9 s
#: per round (§5.2.2), plus the model update between rounds and some slack.
CORRECTIVE_ROUND_ALLOWANCE_S = 30
SESSION_TIMEOUT_MAX_S = 24 * 3600


def _number(values: dict, name: str):
    value = values.get(name)
    return value if isinstance(value, int | float | Decimal) and not isinstance(value, bool) else None


def rule_batch_fits_the_images(values: dict, dataset: Dataset | None) -> list[Problem]:
    """A batch never shows an image twice, so it can hold at most one trial per image with objects."""
    batch_size = _number(values, "batch_size")
    if dataset is None or batch_size is None:
        return []
    images = Image.objects.filter(dataset=dataset, instances__isnull=False).distinct().count()
    if batch_size > images:
        return [
            (
                "batch_size",
                f"Trials per batch: {batch_size} is more than the {images} image(s) with objects in dataset "
                f"“{dataset.name}” (a batch never shows an image twice); use {max(images, 1)} or fewer.",
            )
        ]
    return []


def rule_phases_in_range(values: dict, dataset: Dataset | None) -> list[Problem]:
    """Phases A, B (both modes) and C last 100 to 10 000 ms."""
    low, high = PHASE_MS_RANGE
    problems = []
    for name, label in PHASE_LABELS.items():
        value = _number(values, name)
        if value is not None and not low <= value <= high:
            problems.append(
                (
                    name,
                    f"{label}: {value} ms is out of range; a phase lasts {low} to {high} ms "
                    "(RClicks: 1500 / 2000 / 1500).",
                )
            )
    return problems


def rule_text_description_needs_descriptions(values: dict, dataset: Dataset | None) -> list[Problem]:
    """Text Description mode shows each object's description instead of a picture: every object needs one."""
    if dataset is None or values.get("display_mode") != DisplayMode.TEXT_DESCRIPTION:
        return []
    instances = Instance.objects.filter(image__dataset=dataset)
    missing = instances.filter(text_description__regex=r"^\s*$")
    count = missing.count()
    if not count:
        return []
    example = missing.select_related("image").order_by("image__stem", "object_stem").first()
    return [
        (
            "display_mode",
            f"Display mode: Text Description needs a description of every object, but {count} of "
            f"{instances.count()} objects of dataset “{dataset.name}” have none (e.g. {example}). Add them to "
            "descriptions.csv and import the dataset again, or choose a display mode that shows a picture.",
        )
    ]


def rule_valid_clicks_reachable(values: dict, dataset: Dataset | None) -> list[Problem]:
    """The valid clicks a batch needs are between 1 and the batch size."""
    batch_size, needed = _number(values, "batch_size"), _number(values, "min_valid_per_session")
    if needed is None:
        return []
    if needed < 1:
        return [
            (
                "min_valid_per_session",
                "Valid clicks a batch needs: 0 would count every batch; use at least 1.",
            )
        ]
    if batch_size and needed > batch_size:
        return [
            (
                "min_valid_per_session",
                f"Valid clicks a batch needs: {needed} valid clicks cannot be reached in a batch of {batch_size}; "
                "lower it or raise the batch size.",
            )
        ]
    return []


def rule_something_to_collect(values: dict, dataset: Dataset | None) -> list[Problem]:
    """At least one device class has a quota."""
    pc, mobile = _number(values, "quota_pc"), _number(values, "quota_mobile")
    if pc is None or mobile is None or pc + mobile > 0:
        return []
    return [
        (
            "quota_pc",
            "Valid PC clicks per target: with both quotas 0 the study collects nothing; set one above 0.",
        )
    ]


def rule_timeout_fits_a_batch(values: dict, dataset: Dataset | None) -> list[Problem]:
    """A session must be able to finish before it expires: the timed phases of every trial plus
    ``CLICK_ALLOWANCE_S`` per trial; and expire within a day."""
    timeout = _number(values, "session_timeout_s")
    batch_size = _number(values, "batch_size")
    phases = [_number(values, name) for name in ("image_ms", "blocked_ms")]
    phase_b = _number(
        values, "text_ms" if values.get("display_mode") == DisplayMode.TEXT_DESCRIPTION else "target_ms"
    )
    if timeout is None or batch_size is None or None in phases or phase_b is None:
        return []
    needed_s = int(batch_size * ((sum(phases) + phase_b) / 1000 + CLICK_ALLOWANCE_S))
    if timeout < needed_s:
        return [
            (
                "session_timeout_s",
                f"Session timeout: {timeout} s is too short for a batch of {batch_size} trials; allow at least "
                f"{needed_s} s (the timed phases plus {CLICK_ALLOWANCE_S} s per trial to load and click).",
            )
        ]
    return _timeout_within_a_day(timeout)


def rule_campaign_timeout_fits(values: dict, dataset: Dataset | None) -> list[Problem]:
    """A corrective session must be able to finish before it expires: ``CORRECTIVE_ROUND_ALLOWANCE_S`` per round
    of every instance of the batch; and expire within a day."""
    timeout, batch_size = _number(values, "session_timeout_s"), _number(values, "batch_size")
    rounds = _number(values, "corrective_rounds")
    if timeout is None or batch_size is None or rounds is None:
        return []
    needed_s = int(batch_size * rounds * CORRECTIVE_ROUND_ALLOWANCE_S)
    if timeout < needed_s:
        return [
            (
                "session_timeout_s",
                f"Session timeout: {timeout} s is too short for a campaign batch of {batch_size} instances x {rounds} "
                f"rounds; allow at least {needed_s} s ({CORRECTIVE_ROUND_ALLOWANCE_S} s per round, model update "
                "included).",
            )
        ]
    return _timeout_within_a_day(timeout)


def _timeout_within_a_day(timeout) -> list[Problem]:
    if timeout > SESSION_TIMEOUT_MAX_S:
        return [
            (
                "session_timeout_s",
                f"Session timeout: {timeout} s is more than a day; an abandoned batch would hold its images that "
                f"long. Use at most {SESSION_TIMEOUT_MAX_S} s.",
            )
        ]
    return []


def rule_reward_payable(values: dict, dataset: Dataset | None) -> list[Problem]:
    """Rewards are not negative, and a crowd platform pays something per batch."""
    reward = _number(values, "reward_per_batch")
    if reward is None:
        return []
    if reward < 0:
        return [("reward_per_batch", f"Reward per batch: {reward} is negative; use 0 or more.")]
    platform = values.get("platform")
    if reward == 0 and platform not in (None, "", Platform.LINK):
        return [
            (
                "reward_per_batch",
                f"Reward per batch: {Platform(platform).label} pays workers per batch; a reward of 0 recruits "
                "nobody. Set the amount each batch pays.",
            )
        ]
    return []


def rule_currency_code(values: dict, dataset: Dataset | None) -> list[Problem]:
    """A three-letter ISO 4217 code in capitals (USD, EUR)."""
    currency = values.get("currency")
    if currency is None or (
        len(currency) == 3 and currency.isascii() and currency.isalpha() and currency.isupper()
    ):
        return []
    return [
        ("currency", f"Currency: {currency!r} is not a three-letter code in capitals such as USD or EUR.")
    ]


def rule_qualification_fits(values: dict, dataset: Dataset | None) -> list[Problem]:
    """The qualification test belongs to corrective campaigns and needs as many images with objects as it
    has instances (one instance per image, issue 17)."""
    if not values.get("qualification_enabled"):
        return []
    kind = values.get("kind")
    if kind not in (None, "") and kind != StudyKind.CORRECTIVE:
        return [
            (
                "qualification_enabled",
                f"Qualification test: only corrective-click campaigns have one, and this study's kind is {kind!r}; "
                "set the kind to corrective or turn the test off.",
            )
        ]
    wanted = _number(values, "qualification_instances")
    if dataset is None or wanted is None:
        return []
    images = Image.objects.filter(dataset=dataset, instances__isnull=False).distinct().count()
    if wanted > images:
        return [
            (
                "qualification_instances",
                f"Qualification: instances in the test: {wanted} is more than the {images} image(s) with objects in "
                f"dataset “{dataset.name}” (the test takes one instance per image); use {max(images, 1)} or fewer.",
            )
        ]
    return []


STUDY_RULES: tuple[Rule, ...] = (
    rule_batch_fits_the_images,
    rule_phases_in_range,
    rule_text_description_needs_descriptions,
    rule_valid_clicks_reachable,
    rule_something_to_collect,
    rule_timeout_fits_a_batch,
    rule_campaign_timeout_fits,
    rule_reward_payable,
    rule_currency_code,
    rule_qualification_fits,
)
_BOTH_KINDS = (
    rule_batch_fits_the_images,
    rule_something_to_collect,
    rule_reward_payable,
    rule_currency_code,
    rule_qualification_fits,  # it refuses a test on a timed study itself
)
#: The rules each study kind is judged by (module docstring).
RULES_BY_KIND: dict[str, tuple[Rule, ...]] = {
    StudyKind.TIMED: (
        *_BOTH_KINDS,
        rule_phases_in_range,
        rule_text_description_needs_descriptions,
        rule_valid_clicks_reachable,
        rule_timeout_fits_a_batch,
    ),
    StudyKind.CORRECTIVE: (*_BOTH_KINDS, rule_campaign_timeout_fits),
}


def study_rules_for(kind: str | None) -> tuple[Rule, ...]:
    """The rules of a study of ``kind`` (in ``STUDY_RULES``'s order); an unknown or missing kind (its field has
    its own error) gets the timed study's, the default kind."""
    chosen = RULES_BY_KIND.get(kind or StudyKind.TIMED, RULES_BY_KIND[StudyKind.TIMED])
    return tuple(rule for rule in STUDY_RULES if rule in chosen)


def study_settings_check(*, values: dict, dataset: Dataset | None) -> dict[str, list[str]]:
    """The problems of every rule of the study's kind, by field name (empty when the settings are fine)."""
    problems: dict[str, list[str]] = {}
    for rule in study_rules_for(values.get("kind")):
        for field, message in rule(values, dataset):
            problems.setdefault(field, []).append(message)
    return problems
