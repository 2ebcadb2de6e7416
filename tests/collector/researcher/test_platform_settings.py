"""The study page's platform settings (issue 21): what each crowd platform's card lists
(collector.selectors.platform_settings), the owner's form that changes them, a refusal shown by the field at
fault, and the last sync in words."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from collector.models import PlatformCampaign, PlatformPool, Study
from collector.selectors.platform_settings import study_platform_settings
from tests.factories import make_study

pytestmark = pytest.mark.django_db


def _study(dataset, alice, platform: str, **config) -> Study:
    return make_study(dataset, name=f"{platform} study", owner=alice, platform=platform, reward_per_batch="0.10",
                      batch_size=3, min_valid_per_session=2, platform_config=config)  # fmt: skip


def _launched(
    study: Study, *, project: str = "", skill: str = "", synced_at=None, **pools
) -> PlatformCampaign:
    campaign = PlatformCampaign.objects.create(
        study=study, platform=study.platform, state="open", external_project_id=project,
        external_skill_id=skill, last_synced_at=synced_at,
    )  # fmt: skip
    for device, (external_id, status) in pools.items():
        PlatformPool.objects.create(campaign=campaign, device=device, external_id=external_id,
                                    external_status=status, reward_per_assignment=Decimal("0.10"),
                                    assignments_planned=35)  # fmt: skip
    return campaign


def _settings(study) -> dict:
    return {row["key"]: row for row in study_platform_settings(study=Study.objects.get(pk=study.pk))}


def _page(client, study) -> str:
    return client.get(reverse("researcher:study_detail", args=[study.pk])).content.decode()


def test_prolific_lists_the_completion_code_url_and_study_urls(dataset, alice, settings):
    settings.PUBLIC_BASE_URL = "https://clicks.example.org"
    study = _study(dataset, alice, "prolific")
    rows = _settings(study)
    assert rows["prolific_completion_code"]["value"] == "not set"
    assert "Prolific accepts only the completion codes" in rows["prolific_completion_code"]["problem"]
    assert rows["external_url_pc"]["value"].startswith(f"https://clicks.example.org/prolific/{study.pk}/pc/?")
    assert "external_url_mobile" in rows

    study.platform_config = {"prolific_completion_code": "C1A2B3C4", "prolific_study_id": "ps1"}
    study.save()
    rows = _settings(study)
    assert rows["prolific_completion_code"] == {
        **rows["prolific_completion_code"],
        "value": "C1A2B3C4",
        "problem": "",
    }
    assert rows["completion_url"]["value"] == "https://app.prolific.com/submissions/complete?cc=C1A2B3C4"
    assert rows["prolific_study_id"]["value"] == "ps1"
    assert rows["fee_fraction"]["value"].startswith("33.3%")


def test_toloka_lists_project_pools_with_links_and_the_pool_settings(dataset, alice, settings):
    settings.TOLOKA_API_URL = "https://toloka.dev"
    study = _study(dataset, alice, "toloka", languages=["EN"], pool_days=10)
    assert _settings(study)["project"]["value"] == "created by the launch"
    _launched(study, project="P7", skill="S1", pc=("101", "OPEN"), mobile=("102", "CLOSED"))
    rows = _settings(study)
    assert rows["project"]["url"] == "https://toloka.dev/requester/project/P7"
    assert rows["pool_pc"]["value"] == "101 (OPEN)"
    assert rows["pool_mobile"]["url"] == "https://toloka.dev/requester/project/P7/pool/102"
    assert rows["skill"]["value"] == "S1"
    assert rows["languages"]["value"] == "EN" and rows["pool_days"]["value"] == "10 days"
    assert rows["review_days"]["value"] == "7 days (default)"


def test_mturk_lists_the_hits_marketplace_and_qualification(dataset, alice, settings):
    settings.MTURK_SANDBOX = True
    study = _study(dataset, alice, "mturk")
    _launched(study, skill="Q9", pc=("HIT1", "Assignable"))
    rows = _settings(study)
    assert rows["environment"]["value"].startswith("sandbox")
    assert rows["hit_pc"]["value"].startswith("HIT1 (Assignable), 35 assignments at 0.1")
    assert rows["qualification"]["value"] == "Q9"


def test_standalone_links_have_no_platform_settings(dataset, alice, client):
    study = _study(dataset, alice, "link")
    assert study_platform_settings(study=study) == []
    client.force_login(alice)
    assert 'id="platform-settings"' not in _page(client, study)
    url = reverse("researcher:study_platform_settings", args=[study.pk])
    assert client.post(url, {"max_budget": "5"}).status_code == 404


def test_the_owner_sets_the_prolific_completion_code_from_the_study_page(dataset, alice, client):
    study = _study(dataset, alice, "prolific")
    client.force_login(alice)
    page = _page(client, study)
    assert 'id="platform-settings-form"' in page and "Prolific accepts only the completion codes" in page
    response = client.post(
        reverse("researcher:study_platform_settings", args=[study.pk]),
        {"prolific_completion_code": "C1A2B3C4", "prolific_study_id": "", "max_budget": "12.50"},
    )
    assert response.status_code == 302
    assert Study.objects.get(pk=study.pk).platform_config == {
        "prolific_completion_code": "C1A2B3C4",
        "max_budget": "12.50",
    }
    page = _page(client, study)
    assert "C1A2B3C4" in page and "cc=C1A2B3C4" in page and "Prolific accepts only" not in page

    # emptied: the key goes, the default applies again
    client.post(
        reverse("researcher:study_platform_settings", args=[study.pk]),
        {"prolific_completion_code": "C1A2B3C4"},
    )
    assert Study.objects.get(pk=study.pk).platform_config == {"prolific_completion_code": "C1A2B3C4"}


@pytest.mark.parametrize(
    "platform, field, value, says",
    [
        (
            "prolific",
            "prolific_completion_code",
            "C1 A2!",
            "Completion code: 'C1 A2!' is not a code Prolific issues",
        ),
        (
            "toloka",
            "languages",
            "EN, english",
            "Worker languages: 'ENGLISH' is not a two-letter language code",
        ),
        ("mturk", "review_days", "90", "Ensure this value is less than or equal to 30"),
    ],
)
def test_a_refused_setting_is_shown_beside_its_field(dataset, alice, client, platform, field, value, says):
    study = _study(dataset, alice, platform, pool_days=10)
    client.force_login(alice)
    response = client.post(reverse("researcher:study_platform_settings", args=[study.pk]), {field: value})
    assert response.status_code == 400
    page = response.content.decode()
    label = re.search(rf'<label class="field has-error" for="id_{field}">(.*?)</label>', page, re.S)
    assert label is not None, f"no error beside {field}"
    assert says in label.group(1).replace("&#x27;", "'")
    assert Study.objects.get(pk=study.pk).platform_config == {"pool_days": 10}  # nothing saved


def test_only_the_owner_changes_platform_settings(dataset, alice, bob, client):
    study = _study(dataset, alice, "prolific")
    client.force_login(bob)
    response = client.post(
        reverse("researcher:study_platform_settings", args=[study.pk]), {"prolific_completion_code": "X1"}
    )
    assert response.status_code in (403, 404)
    assert Study.objects.get(pk=study.pk).platform_config == {}


def test_last_sync_is_a_date_and_time_with_how_long_ago(dataset, alice, client):
    study = _study(dataset, alice, "toloka")
    synced = timezone.now() - timedelta(minutes=7)
    _launched(study, project="P7", pc=("101", "OPEN"), synced_at=synced)
    client.force_login(alice)
    page = _page(client, study)
    shown = re.search(r'<span id="platform-last-sync">(.*?)</span>', page).group(1)
    assert shown == f"{synced:%-d %b %Y, %H:%M} UTC (7\xa0minutes ago)", shown
    assert "T" not in shown.split(" UTC")[0]  # not the raw ISO stamp
