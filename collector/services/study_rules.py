"""Rules a study's settings must meet before it is created, checked against its dataset.

The study form (``collector.researcher.forms.StudyForm``) and the researcher API's serializer run the same
rules. Each rule is one function ``rule(values, dataset) -> [(field, message)]`` that looks only at the
values it needs (``values``: the cleaned form fields; a missing value means that field already has its own
error, so the rule stays silent); ``dataset`` is the chosen Dataset or None. A message names the field
by its label, the value at fault and what to do. Add a rule by writing a function and listing it in
``STUDY_RULES``, then in ``RULES_BY_KIND`` for each study kind it applies to.

A study's kind decides which settings apply (``KIND_ONLY_FIELDS``) and which rules judge them
(``RULES_BY_KIND``): a corrective campaign has no timed phases, no display mode, no 7-of-10 batch rule (its
sessions count when every instance is done) and no practice or control trials, and its session must leave time
for R rounds per instance instead (``rule_campaign_timeout_fits``); a timed study has no campaign settings. The
rules see only the settings of the study's kind (``study_values_for_kind``), so a corrective study is never
refused for a timed setting it does not use, and the form hides the other kind's fields.
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


#: The screens a worker sees before a timed batch (issue 32 item 5): consent, instructions, practice and control.
SCREEN_FIELDS = (
    "consent_enabled",
    "consent_texts",
    "instructions_texts",
    "practice_trials",
    "control_trials",
    "control_min_inside",
)
#: How a timed study's reservations follow the worker (issue 32 item 2): the grace period, short batches and
#: rejected work.
RESERVATION_FIELDS = ("reservation_grace_s", "short_batches", "rejected_work")
#: The shortest grace period (s): the player sends a heartbeat every 20 s, so one lost heartbeat never releases
#: a batch whose page is open (collector.services.reservations.HEARTBEAT_S).
RESERVATION_GRACE_MIN_S = 30
#: Settings that belong to one study kind only (the others apply to both kinds).
KIND_ONLY_FIELDS: dict[str, tuple[str, ...]] = {
    StudyKind.TIMED: (
        "display_mode",
        "image_ms",
        "target_ms",
        "text_ms",
        "blocked_ms",
        "min_valid_per_session",
        "batch_rule",
        "min_reaction_ms",
        *SCREEN_FIELDS,
        *RESERVATION_FIELDS,
    ),
    StudyKind.CORRECTIVE: (
        "corrective_init",
        "corrective_rounds",
        "corrective_clicks_per_round",
        "qualification_enabled",
        "qualification_instances",
        "qualification_min_placement",
        "qualification_min_gain",
    ),
}
#: Toloka pays its workers in US dollars: a pool's reward is a number of dollars.
TOLOKA_CURRENCY = "USD"


def fields_not_for_kind(kind: str | None) -> tuple[str, ...]:
    """The settings of the other kind(s): those a study of ``kind`` (None or "": timed) does not use."""
    chosen = kind or StudyKind.TIMED
    return tuple(name for other, names in KIND_ONLY_FIELDS.items() if other != chosen for name in names)


#: Judged whatever the kind: a timed study that asks for a qualification test is told that only corrective
#: campaigns have one (the form resets the field on timed studies; the API says so).
JUDGED_FOR_EVERY_KIND = ("qualification_enabled",)


def study_values_for_kind(values: dict) -> dict:
    """``values`` without the settings the study's kind does not use (the rules then leave them alone), but
    for ``JUDGED_FOR_EVERY_KIND``."""
    unused = set(fields_not_for_kind(values.get("kind"))) - set(JUDGED_FOR_EVERY_KIND)
    return {name: value for name, value in values.items() if name not in unused}


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


def rule_reservation_grace_fits(values: dict, dataset: Dataset | None) -> list[Problem]:
    """The grace period is at least ``RESERVATION_GRACE_MIN_S`` and shorter than the session timeout (past the
    timeout the session expires anyway, so a longer grace would never release anything)."""
    grace, timeout = _number(values, "reservation_grace_s"), _number(values, "session_timeout_s")
    if grace is None:
        return []
    if grace < RESERVATION_GRACE_MIN_S:
        return [
            (
                "reservation_grace_s",
                f"Reservation grace period: {grace} s is shorter than the {RESERVATION_GRACE_MIN_S} s a page that is "
                "still open may take between two heartbeats; use at least "
                f"{RESERVATION_GRACE_MIN_S} (120 is the default).",
            )
        ]
    # judged against a timeout that is itself fine (rule_timeout_fits_a_batch says what is wrong with it)
    if timeout is not None and grace >= timeout and not rule_timeout_fits_a_batch(values, dataset):
        return [
            (
                "reservation_grace_s",
                f"Reservation grace period: {grace} s is not shorter than the session timeout ({timeout} s), so an "
                "abandoned batch would hold its images until it expires; lower it (120 is the default) or raise "
                "the timeout.",
            )
        ]
    return []


def rule_tail_batches_can_count(values: dict, dataset: Dataset | None) -> list[Problem]:
    """``tail`` short batches are offered only when they can still meet the batch rule: with a rule that needs
    every trial of a full batch, no shorter batch ever could, and ``tail`` would mean ``full_only``."""
    batch_size, needed = _number(values, "batch_size"), _number(values, "min_valid_per_session")
    if values.get("short_batches") != "tail" or batch_size is None or needed is None or needed < batch_size:
        return []
    return [
        (
            "short_batches",
            f"Short batches: a batch needs {needed} valid clicks of {batch_size}, so no shorter batch could ever "
            "count; choose “only full batches”, or lower the valid clicks a batch needs.",
        )
    ]


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
    """A session must be able to finish before it expires: the timed phases of every trial (practice and
    control trials included) plus ``CLICK_ALLOWANCE_S`` per trial; and expire within a day."""
    timeout = _number(values, "session_timeout_s")
    batch_size = _number(values, "batch_size")
    if batch_size is not None:
        batch_size += (_number(values, "practice_trials") or 0) + (_number(values, "control_trials") or 0)
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


def rule_toloka_pays_in_dollars(values: dict, dataset: Dataset | None) -> list[Problem]:
    """Toloka pays in US dollars: a Toloka study's reward and bonus are in USD (the pool gets the number as
    it is, so another currency would pay the wrong amount). Convert the amount yourself; no rate is guessed."""
    currency = values.get("currency")
    if values.get("platform") != Platform.TOLOKA or currency in (None, TOLOKA_CURRENCY):
        return []
    return [
        (
            "currency",
            f"Currency: Toloka pays workers in {TOLOKA_CURRENCY}, and {currency!r} is not it (Toloka would read "
            f"the reward as dollars). Set the currency to {TOLOKA_CURRENCY} and give the reward per batch in "
            "dollars, converted at the rate you choose.",
        )
    ]


def rule_screen_trials_fit(values: dict, dataset: Dataset | None) -> list[Problem]:
    """Practice and control trials show images of their own (a batch never shows an image twice), so a full
    batch with its practice and control trials needs that many images with objects."""
    batch_size = _number(values, "batch_size")
    practice, control = _number(values, "practice_trials"), _number(values, "control_trials")
    if dataset is None or batch_size is None or practice is None or control is None or not practice + control:
        return []
    images = Image.objects.filter(dataset=dataset, instances__isnull=False).distinct().count()
    if batch_size + practice + control <= images:
        return []
    field = "control_trials" if control else "practice_trials"
    return [
        (
            field,
            f"Practice and control trials: a batch of {batch_size} trials with {practice} practice and {control} "
            f"control trial(s) needs {batch_size + practice + control} images with objects (a batch never shows "
            f"an image twice), and dataset “{dataset.name}” has {images}; lower the trials per batch to "
            f"{max(images - practice - control, 0)} or ask for fewer practice or control trials.",
        )
    ]


def rule_control_rule_reachable(values: dict, dataset: Dataset | None) -> list[Problem]:
    """With control trials, the control clicks a batch needs inside are between 1 and the control trials."""
    control, needed = _number(values, "control_trials"), _number(values, "control_min_inside")
    if not control or needed is None:
        return []
    if needed < 1:
        return [
            (
                "control_min_inside",
                "Control clicks a batch needs inside: 0 would let every batch pass its control trials; use at "
                "least 1, or set the control trials to 0.",
            )
        ]
    if needed > control:
        return [
            (
                "control_min_inside",
                f"Control clicks a batch needs inside: {needed} cannot be reached with {control} control trial(s) "
                "per batch; lower it or add control trials.",
            )
        ]
    return []


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
    rule_reservation_grace_fits,
    rule_tail_batches_can_count,
    rule_something_to_collect,
    rule_timeout_fits_a_batch,
    rule_campaign_timeout_fits,
    rule_reward_payable,
    rule_currency_code,
    rule_toloka_pays_in_dollars,
    rule_screen_trials_fit,
    rule_control_rule_reachable,
    rule_qualification_fits,
)
_BOTH_KINDS = (
    rule_batch_fits_the_images,
    rule_something_to_collect,
    rule_reward_payable,
    rule_currency_code,
    rule_toloka_pays_in_dollars,
    rule_qualification_fits,  # it refuses a test on a timed study itself
)
#: The rules each study kind is judged by (module docstring).
RULES_BY_KIND: dict[str, tuple[Rule, ...]] = {
    StudyKind.TIMED: (
        *_BOTH_KINDS,
        rule_phases_in_range,
        rule_text_description_needs_descriptions,
        rule_valid_clicks_reachable,
        rule_reservation_grace_fits,
        rule_tail_batches_can_count,
        rule_timeout_fits_a_batch,
        rule_screen_trials_fit,
        rule_control_rule_reachable,
    ),
    StudyKind.CORRECTIVE: (*_BOTH_KINDS, rule_campaign_timeout_fits),
}


def study_rules_for(kind: str | None) -> tuple[Rule, ...]:
    """The rules of a study of ``kind`` (in ``STUDY_RULES``'s order); an unknown or missing kind (its field has
    its own error) gets the timed study's, the default kind."""
    chosen = RULES_BY_KIND.get(kind or StudyKind.TIMED, RULES_BY_KIND[StudyKind.TIMED])
    return tuple(rule for rule in STUDY_RULES if rule in chosen)


def study_settings_check(*, values: dict, dataset: Dataset | None) -> dict[str, list[str]]:
    """The problems of every rule of the study's kind, by field name (empty when the settings are fine);
    settings of another study kind than ``values["kind"]`` are not judged."""
    problems: dict[str, list[str]] = {}
    judged = study_values_for_kind(values)
    for rule in study_rules_for(values.get("kind")):
        for field, message in rule(judged, dataset):
            problems.setdefault(field, []).append(message)
    return problems
