"""The study form's rules (collector.services.study_rules), one test per rule, through the real form and
the researcher API: a clear message on the field at fault, and nothing created."""

from __future__ import annotations

import csv

import pytest
from rest_framework.test import APIClient

from collector.models import Study
from collector.researcher.forms import StudyForm, batch_defaults
from collector.services.datasets import dataset_import
from tests.factories import draw_dataset_folder, make_dataset

pytestmark = pytest.mark.django_db


def _valid(dataset, **changes) -> dict:
    data = {
        "name": "rules", "dataset": dataset.pk, "display_mode": "Object_CutOut", "image_ms": 1500,
        "target_ms": 2000, "text_ms": 2500, "blocked_ms": 1500, "batch_size": 3, "quota_pc": 5, "quota_mobile": 5,
        "radius_fraction": 0.01, "min_valid_per_session": 2, "min_reaction_ms": 150, "session_timeout_s": 1800,
        "platform": "link", "reward_per_batch": "0.05", "currency": "USD",
    }  # fmt: skip
    data.update(changes)
    return data


def _errors(dataset, **changes) -> dict[str, list[str]]:
    form = StudyForm(_valid(dataset, **changes))
    assert not form.is_valid()
    return form.errors


def test_the_valid_settings_pass(dataset):
    form = StudyForm(_valid(dataset))
    assert form.is_valid(), form.errors


def test_batch_size_cannot_exceed_the_images(dataset):
    errors = _errors(dataset, batch_size=10)
    assert list(errors) == ["batch_size"]
    (message,) = errors["batch_size"]
    assert "Trials per batch: 10 is more than the 3 image(s)" in message and "use 3 or fewer" in message


@pytest.mark.parametrize(
    ("field", "value", "label"),
    [
        ("image_ms", 0, "Phase A: image: 0 ms"),
        ("target_ms", 50, "Phase B: target: 50 ms"),
        ("text_ms", 60000, "Phase B in Text Description mode: 60000 ms"),
        ("blocked_ms", 10001, "Phase C: image, clicking blocked: 10001 ms"),
    ],
)
def test_phase_durations_are_in_range(dataset, field, value, label):
    errors = _errors(dataset, **{field: value})
    assert list(errors) == [field]
    assert label in errors[field][0] and "100 to 10000 ms" in errors[field][0]


def test_text_description_needs_every_description(dataset, tmp_path):
    errors = _errors(dataset, display_mode="Text_Description")
    assert list(errors) == ["display_mode"]
    assert "3 of 3 objects" in errors["display_mode"][0] and "descriptions.csv" in errors["display_mode"][0]

    folder = draw_dataset_folder(tmp_path / "described", n_images=3)
    with open(folder / "descriptions.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image_stem", "object_stem", "description"])
        writer.writerows(
            [("img00", "", "the red ellipse"), ("img01", "", "the red ellipse")]
        )  # img02 has none
    partly = dataset_import(path=folder, layout="folder", name="described").dataset
    errors = _errors(partly, display_mode="Text_Description")
    assert "1 of 3 objects" in errors["display_mode"][0] and "img02" in errors["display_mode"][0]
    with open(folder / "descriptions.csv", "a", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerow(("img02", "", "the red ellipse"))
    described = dataset_import(path=folder, layout="folder", name="described in full").dataset
    assert StudyForm(_valid(described, display_mode="Text_Description")).is_valid()


@pytest.mark.parametrize(
    ("needed", "text"), [(4, "4 valid clicks cannot be reached in a batch of 3"), (0, "use at least 1")]
)
def test_valid_clicks_a_batch_needs_are_reachable(dataset, needed, text):
    errors = _errors(dataset, min_valid_per_session=needed)
    assert list(errors) == ["min_valid_per_session"] and text in errors["min_valid_per_session"][0]


def test_some_quota_is_needed(dataset):
    errors = _errors(dataset, quota_pc=0, quota_mobile=0)
    assert list(errors) == ["quota_pc"] and "collects nothing" in errors["quota_pc"][0]


@pytest.mark.parametrize(("timeout", "text"), [(30, "allow at least 45 s"), (100_000, "more than a day")])
def test_session_timeout_fits_a_batch(dataset, timeout, text):
    # 3 trials × (1.5 + 2 + 1.5 s of phases + 10 s to load and click) = 45 s
    errors = _errors(dataset, session_timeout_s=timeout)
    assert list(errors) == ["session_timeout_s"] and text in errors["session_timeout_s"][0]


@pytest.mark.parametrize(
    ("reward", "platform", "text"),
    [("-0.01", "link", "is negative"), ("0", "toloka", "Toloka pays workers per batch")],
)
def test_reward_is_payable(dataset, reward, platform, text):
    errors = _errors(dataset, reward_per_batch=reward, platform=platform)
    assert list(errors) == ["reward_per_batch"] and text in errors["reward_per_batch"][0]
    assert StudyForm(_valid(dataset, reward_per_batch="0", platform="link")).is_valid()


def test_currency_is_a_code(dataset):
    errors = _errors(dataset, currency="us$")
    assert list(errors) == ["currency"] and "three-letter code" in errors["currency"][0]


def test_the_page_shows_the_message_by_the_field_and_creates_nothing(client, alice, dataset):
    client.force_login(alice)
    response = client.post("/researcher/studies/new/", _valid(dataset, batch_size=10, image_ms=0))
    page = response.content.decode()
    assert response.status_code == 200
    assert "Trials per batch: 10 is more than the 3 image(s)" in page and "Phase A: image: 0 ms" in page
    assert page.count('class="field has-error"') == 2
    assert not Study.objects.filter(name="rules").exists()


def test_the_api_runs_the_same_rules(alice, dataset):
    client = APIClient()
    client.force_authenticate(alice)
    data = _valid(dataset)
    response = client.post("/api/researcher/studies/", {**data, "batch_size": 10}, format="json")
    assert response.status_code == 400 and response.json()["field"] == "batch_size"
    assert "more than the 3 image(s)" in response.json()["message"]
    # a field the request leaves out takes the model default (batch_size 10), which the rules also judge
    partial = {k: v for k, v in data.items() if k != "batch_size"}
    assert client.post("/api/researcher/studies/", partial, format="json").json()["field"] == "batch_size"
    assert client.post("/api/researcher/studies/", data, format="json").status_code == 201


# --- issue 32: only the chosen kind's fields, the error summary, defaults that fit, screens, Toloka's USD ---


def test_a_corrective_study_is_not_judged_by_the_timed_rules(alice, dataset):
    """Batches of 3 that need 4 valid clicks and a phase of 0 ms: timed settings a campaign does not use."""
    data = _valid(dataset, kind="corrective", min_valid_per_session=4, image_ms=0, practice_trials=9)
    form = StudyForm(data)
    assert form.is_valid(), form.errors
    fields = form.study_fields()
    # what a corrective study does not use keeps its model default, whatever was posted
    assert (fields["min_valid_per_session"], fields["image_ms"], fields["practice_trials"]) == (7, 1500, 0)
    assert fields["kind"] == "corrective" and fields["batch_size"] == 3
    # the API gives a campaign the same freedom (issue 34 item 4)
    client = APIClient()
    client.force_authenticate(alice)
    response = client.post("/api/researcher/studies/", {**_valid(dataset), "kind": "corrective",
                                                         "min_valid_per_session": 4}, format="json")  # fmt: skip
    assert response.status_code == 201, response.json()
    # and the same settings on a timed study are refused
    assert "min_valid_per_session" in _errors(dataset, min_valid_per_session=4)


def test_a_timed_study_ignores_the_campaign_fields(dataset):
    form = StudyForm(
        _valid(dataset, corrective_rounds=0, qualification_instances=99, qualification_enabled="on")
    )
    assert form.is_valid(), form.errors
    fields = form.study_fields()
    assert (fields["corrective_rounds"], fields["qualification_instances"]) == (3, 3)
    assert fields["qualification_enabled"] is False


def test_the_page_shows_only_the_chosen_kind_and_an_error_summary(client, alice, dataset):
    client.force_login(alice)
    page = client.get("/researcher/studies/new/").content.decode()
    assert 'id="corrective-settings" data-kind="corrective" hidden' in page
    assert 'id="timing-settings" data-kind="timed">' in page and 'id="error-summary"' not in page

    response = client.post("/researcher/studies/new/", _valid(dataset, batch_size=10, image_ms=0))
    page = response.content.decode()
    summary = page[page.index('id="error-summary"') : page.index("</div>", page.index('id="error-summary"'))]
    assert "2 settings to fix" in summary
    assert '<a href="#id_image_ms" data-field="id_image_ms">Phase A: image: 0 ms' in summary
    assert '<a href="#id_batch_size" data-field="id_batch_size">Trials per batch: 10 is more than' in summary
    assert page.index('id="error-summary"') < page.index('id="study-form"'), "the summary comes first"

    corrective = client.post(
        "/researcher/studies/new/", _valid(dataset, kind="corrective", corrective_rounds=0)
    )
    page = corrective.content.decode()
    assert 'id="timing-settings" data-kind="timed" hidden' in page
    assert 'id="corrective-settings" data-kind="corrective">' in page
    assert '<a href="#id_corrective_rounds"' in page


def test_the_form_starts_with_a_batch_the_dataset_can_give(client, alice, dataset, tmp_path):
    client.force_login(alice)
    # the only dataset has 3 images: a batch of 3 that needs 3 valid clicks (7/10 of it, rounded up)
    form = client.get("/researcher/studies/new/").context["form"]
    assert (form["batch_size"].value(), form["min_valid_per_session"].value()) == (3, 3)
    make_dataset(tmp_path, name="AAA twelve images", n_images=12)
    form = client.get("/researcher/studies/new/").context["form"]
    assert (form["batch_size"].value(), form["min_valid_per_session"].value()) == (10, 7)
    datasets = client.get("/researcher/studies/new/").context["datasets_data"]
    assert {d["name"]: d["defaults"]["batch_size"] for d in datasets} == {
        "AAA twelve images": 10,
        dataset.name: 3,
    }
    assert batch_defaults(images=5) == {"batch_size": 5, "min_valid_per_session": 4}  # the demo's 5 photos


def test_the_screens_are_gathered_by_language(client, alice, dataset):
    client.force_login(alice)
    data = _valid(
        dataset, name="screens", consent_enabled="on", consent_text_en="  Agree?  ", consent_text_ru="Согласны?",
        instructions_text_ru="Кликните по объекту.", instructions_text_en="", practice_trials=0, control_trials=0,
    )  # fmt: skip
    response = client.post("/researcher/studies/new/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    study = Study.objects.get(name="screens")
    assert study.consent_enabled is True
    assert study.consent_texts == {"en": "Agree?", "ru": "Согласны?"}
    assert study.instructions_texts == {"ru": "Кликните по объекту."}


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        ({"practice_trials": 1}, "practice_trials", "needs 4 images with objects"),
        ({"batch_size": 2, "control_trials": 2, "min_valid_per_session": 1}, "control_trials", "lower the trials per batch to 1"),
        ({"batch_size": 1, "min_valid_per_session": 1, "control_trials": 1, "control_min_inside": 2},
         "control_min_inside", "2 cannot be reached with 1 control trial"),
        ({"batch_size": 1, "min_valid_per_session": 1, "control_trials": 1, "control_min_inside": 0},
         "control_min_inside", "use at least 1"),
    ],
)  # fmt: skip
def test_practice_and_control_trials_must_fit(dataset, changes, field, text):
    errors = _errors(dataset, **changes)
    assert list(errors) == [field] and text in errors[field][0]


def test_a_toloka_study_is_paid_in_dollars(dataset):
    errors = _errors(dataset, platform="toloka", currency="EUR")
    assert list(errors) == ["currency"]
    assert "Currency: Toloka pays workers in USD, and 'EUR' is not it" in errors["currency"][0]
    assert StudyForm(_valid(dataset, platform="toloka", currency="USD")).is_valid()
    assert StudyForm(_valid(dataset, platform="prolific", currency="EUR")).is_valid()


# --------------------------------------------------------------------------------------------------
# Rules per study kind (issue 34.4): a corrective campaign is not judged by the timed study's rules


def test_a_campaign_of_six_is_not_judged_by_the_timed_studys_seven_of_ten(alice, tmp_path):
    folder = draw_dataset_folder(tmp_path / "six", n_images=6)
    six = dataset_import(path=folder, layout="folder", name="six").dataset
    # the defaults of a timed study (7 valid clicks a batch needs) beside a batch of 6
    campaign = {**_valid(six, batch_size=6, min_valid_per_session=7, image_ms=0), "kind": "corrective"}
    form = StudyForm(campaign)
    assert form.is_valid(), form.errors
    errors = _errors(six, batch_size=6, min_valid_per_session=7, image_ms=0)  # the same, timed
    assert sorted(errors) == ["image_ms", "min_valid_per_session"]
    client = APIClient()
    client.force_authenticate(alice)
    left_out = {k: v for k, v in campaign.items() if k not in ("min_valid_per_session", "image_ms")}
    created = client.post("/api/researcher/studies/", left_out, format="json")  # model defaults: 7 of 10
    assert created.status_code == 201, created.content
    assert (created.json()["kind"], created.json()["batch_size"]) == ("corrective", 6)
    timed = client.post("/api/researcher/studies/", {**left_out, "kind": "timed"}, format="json")
    assert (
        timed.status_code == 400
        and timed.json()["field"] == "min_valid_per_session"
        and "cannot be reached in a batch of 6" in timed.json()["message"]
    )


def test_a_campaigns_session_must_leave_time_for_its_rounds(dataset):
    # 3 instances x 3 rounds x 30 s per round = 270 s (the timed rule would ask for 45 s)
    errors = _errors(dataset, kind="corrective", session_timeout_s=200)
    assert list(errors) == ["session_timeout_s"]
    assert "3 instances x 3 rounds; allow at least 270 s" in errors["session_timeout_s"][0]
    assert StudyForm(_valid(dataset, kind="corrective", session_timeout_s=270)).is_valid()
    assert (
        "more than a day"
        in _errors(dataset, kind="corrective", session_timeout_s=100_000)["session_timeout_s"][0]
    )


def test_the_reservation_settings_default_and_are_checked(dataset):
    """Issue 32 item 2: a form without them keeps the defaults; a grace period under 30 s or not shorter than the
    timeout, and tail batches that could never count, are refused naming the field, the value and what to do."""
    form = StudyForm(_valid(dataset))
    assert form.is_valid(), form.errors
    fields = form.study_fields()
    assert (fields["reservation_grace_s"], fields["short_batches"], fields["rejected_work"]) == (
        120,
        "pad",
        "release",
    )
    form = StudyForm(_valid(dataset, reservation_grace_s=300, short_batches="tail", rejected_work="count"))
    assert form.is_valid(), form.errors

    (message,) = _errors(dataset, reservation_grace_s=10)["reservation_grace_s"]
    assert (
        message.startswith("Reservation grace period: 10 s is shorter than the 30 s")
        and "at least 30" in message
    )
    (message,) = _errors(dataset, reservation_grace_s=1800)["reservation_grace_s"]
    assert "not shorter than the session timeout (1800 s)" in message
    (message,) = _errors(dataset, short_batches="tail", min_valid_per_session=3)["short_batches"]
    assert "a batch needs 3 valid clicks of 3, so no shorter batch could ever count" in message
    corrective = StudyForm(_valid(dataset, kind="corrective"))
    assert "reservation_grace_s" in corrective.hidden_fields_for_kind()


def test_the_study_page_says_what_the_rejected_work_policy_did(client, dataset, django_user_model):
    from collector.models import Session, Target
    from collector.services.validation import session_platform_rejected
    from tests.factories import make_researcher, make_study, make_validated_batch

    researcher = make_researcher()
    study = make_study(
        dataset, publish=True, batch_size=3, min_valid_per_session=2, quota_pc=2, owner=researcher
    )
    counted = make_validated_batch(study)
    assert counted.validity == "counted"
    assert session_platform_rejected(session_id=counted.pk)["released"] == 3
    assert set(Target.objects.filter(round__study=study).values_list("valid_pc", flat=True)) == {0}
    client.force_login(researcher)
    page = client.get(f"/researcher/studies/{study.pk}/").content.decode()
    assert "1 counted batch rejected on the platform: 3 valid clicks given back to the quotas" in page
    assert "policy: given back: its clicks stop counting toward the quotas" in page
    assert Session.objects.get(pk=counted.pk).platform_state["rejected"]["policy"] == "release"


def test_the_batch_rule_is_a_timed_study_setting_of_the_form(client, dataset):
    from tests.factories import make_researcher

    client.force_login(make_researcher("rules"))
    page = client.get("/researcher/studies/new/").content.decode()
    assert 'name="batch_rule"' in page and "the RClicks paper&#x27;s wording" in page
    assert StudyForm(_valid(dataset)).is_valid()  # left out: the default, valid
    form = StudyForm(_valid(dataset, batch_rule="inside"))
    assert form.is_valid(), form.errors
    assert form.cleaned_data["batch_rule"] == "inside"
    assert "batch_rule" in _errors(dataset, batch_rule="within")
    response = client.post(
        "/researcher/studies/new/", _valid(dataset, name="inside study", batch_rule="inside")
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    study = Study.objects.get(name="inside study")
    assert study.batch_rule == "inside"
    detail = client.get(f"/researcher/studies/{study.pk}/").content.decode()
    assert "clicks are clicks inside the object mask" in detail and "<code>inside</code>" in detail
    # a corrective campaign has no batch rule: it keeps the default whatever is posted
    corrective = StudyForm(_valid(dataset, kind="corrective", batch_rule="inside"))
    corrective.is_valid()
    assert corrective.cleaned_data.get("batch_rule") == "valid"


def test_the_researcher_api_takes_and_checks_the_batch_rule(dataset):
    from rest_framework.authtoken.models import Token

    from tests.factories import make_researcher

    client = APIClient()
    token, _ = Token.objects.get_or_create(user=make_researcher("api"))
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    made = client.post("/api/researcher/studies/", _valid(dataset, batch_rule="inside"), format="json")
    assert made.status_code == 201, made.content
    assert made.json()["batch_rule"] == "inside"
    bad = client.post("/api/researcher/studies/", _valid(dataset, batch_rule="half"), format="json")
    assert bad.status_code == 400 and bad.json()["field"] == "batch_rule"
