"""tasks.platforms.qualification_send through a real Celery worker process against the local fake Toloka API
over HTTP (the real toloka-kit client): a corrective campaign with a qualification test launched on Toloka gets
a qualification skill and pools that keep failed workers out; a worker's test result becomes that skill's
value (100 passed, 0 failed) once the test is finished, sent through the transactional outbox."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from collector.models import CorrectiveQualification, PlatformCampaign, Session
from collector.services.launch import study_launch
from collector.services.tokens import session_token_read
from tests.collector.test_services_qualification import _work, background, careful
from tests.conftest import FAKE_TOLOKA_TOKEN
from tests.factories import make_dataset, make_study
from tests.support.celery_worker import CeleryWorkerProcess, purge_queues, wait_until

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

BASE = "https://clicklab.example.org"


@pytest.fixture
def toloka_worker(fake_toloka, exclusive_broker):
    """A Celery worker of our own whose toloka-kit client talks to the fake (the shared worker's environment
    names no Toloka)."""
    purge_queues()
    process = CeleryWorkerProcess(
        queues="default",
        environment={
            "TOLOKA_API_URL": fake_toloka.url,
            "TOLOKA_TOKEN": FAKE_TOLOKA_TOKEN,
            "TOLOKA_RETRIES": "1",
            "TOLOKA_TIMEOUT_S": "2",
        },
    )
    yield process
    process.stop()
    purge_queues()


@pytest.fixture
def study(tmp_path, settings, fake_toloka, plain_http_pages):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.PUBLIC_BASE_URL = BASE
    dataset = make_dataset(tmp_path, n_images=5, size=(160, 120))
    return make_study(
        dataset,
        platform="toloka",
        kind="corrective",
        corrective_init="first_click",
        corrective_rounds=2,
        batch_size=2,
        quota_pc=2,
        quota_mobile=0,
        reward_per_batch=Decimal("0.05"),
        qualification_enabled=True,
        qualification_instances=2,
    )


def _enter(pool, assignment_id: str) -> Session:
    url = pool.entry_url.replace(BASE, "") + "&toloka_assignment=" + assignment_id
    response = Client().get(url)
    assert response.status_code == 303, response.content.decode()[:500]
    return Session.objects.get(pk=session_token_read(token=response["Location"].split("/a/")[1].strip("/")))


def test_the_test_result_becomes_the_workers_toloka_skill(study, fake_toloka, toloka_worker):
    campaign = study_launch(study_id=study.pk)
    skill_id = PlatformCampaign.objects.get(pk=campaign.pk).external_qualification_skill_id
    state = fake_toloka.state()
    assert skill_id and state["skills"][skill_id]["name"] == f"clicklab-study-{study.pk}-qualification"
    pool = campaign.pools.get(device="pc")
    conditions = str(state["pools"][pool.external_id]["filter"])
    assert f"'key': '{skill_id}', 'operator': 'GTE', 'value': 100" in conditions, conditions

    toloka_worker.start()
    results = {}
    for user_id, clicker in (("user-careful", careful), ("user-background", background)):
        assignment = fake_toloka.take(pool_id=pool.external_id, user_id=user_id)
        test = _enter(pool, assignment["id"])
        assert test.is_qualification
        _work(test, clicker)  # finishing commits the result and its task intent; the worker sets the skill
        results[user_id] = (assignment["id"], CorrectiveQualification.objects.get(session=test))

    def skills():
        return {
            k: v["value"] for k, v in fake_toloka.state()["user_skills"].items() if k.startswith(skill_id)
        }

    wait_until(lambda: len(skills()) == 2, timeout_s=90, what="both qualification skills to be set on Toloka")
    assert {key: float(value) for key, value in skills().items()} == {
        f"{skill_id}:user-careful": 100.0,
        f"{skill_id}:user-background": 0.0,
    }
    for _assignment, result in results.values():
        result.refresh_from_db()
        assert result.platform_sent_at is not None and result.platform_error == ""
    assert results["user-careful"][1].passed and not results["user-background"][1].passed

    # The passed worker reopening the task goes to the real batch; the failed one is refused politely.
    real = _enter(pool, results["user-careful"][0])
    assert not real.is_qualification and real.trials.count() == 2
    response = Client().get(
        pool.entry_url.replace(BASE, "") + "&toloka_assignment=" + results["user-background"][0]
    )
    assert response.status_code == 409 and "did not meet this task" in response.content.decode()
