"""The study page's session monitor and simulated-annotator buttons through Django's test client: who may use
them (owner; a researcher it is shared with gets 403, another researcher 404, a visitor the login page), CSRF,
the messages on the page and the slots after each control."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from collector.models import Session, Target, TaskIntent, Worker
from collector.services.session_start import session_start
from tests.factories import make_researcher, make_worker, present_trials

pytestmark = pytest.mark.django_db


def _inflight(study) -> int:
    return sum(t.inflight_pc + t.inflight_mobile for t in Target.objects.filter(round__study=study))


@pytest.fixture
def running(alice_study):
    session = session_start(study=alice_study, worker=make_worker(), device="pc")
    present_trials(session)
    return session


def _controls(study, session):
    return [
        reverse("researcher:session_release", args=[study.pk, session.pk]),
        reverse("researcher:session_expire", args=[study.pk, session.pk]),
        reverse("researcher:worker_block", args=[study.pk, session.worker_id]),
        reverse("researcher:study_bots_run", args=[study.pk]),
        reverse("researcher:study_bots_remove", args=[study.pk]),
    ]


def test_the_study_page_lists_running_sessions_with_their_controls(client, alice, alice_study, running):
    client.force_login(alice)
    page = client.get(reverse("researcher:study_detail", args=[alice_study.pk])).content.decode()
    assert f'id="monitor-session-{running.pk}"' in page
    assert running.worker.pseudonym in page
    assert "0 / 3" in page  # clicked / trials
    for label in ("Release", "Expire", "Block worker"):
        assert f">{label}</button>" in page
    targets = client.get(reverse("researcher:target_list", args=[alice_study.pk])).content.decode()
    assert targets.count('class="num inflight-pc">1<') == 3  # the batch's three targets, one slot each


def test_visitors_other_researchers_and_shared_researchers_cannot_use_the_controls(
    client, alice_study, running, bob
):
    for url in _controls(alice_study, running):
        response = client.post(url)
        assert response.status_code == 302 and "/researcher/login/" in response["Location"], url
    client.force_login(bob)
    for url in _controls(alice_study, running):
        assert client.post(url).status_code == 404, url
    carol = make_researcher("carol")
    alice_study.researchers.add(carol)
    client.force_login(carol)
    for url in _controls(alice_study, running):
        assert client.post(url, {"reason": "x", "bots": "1"}).status_code == 403, url
    assert Session.objects.get(pk=running.pk).status == "started" and _inflight(alice_study) == 3
    assert not Worker.objects.filter(excluded=True).exists()


def test_the_controls_need_the_csrf_token(alice, alice_study, running):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    url = reverse("researcher:session_expire", args=[alice_study.pk, running.pk])
    assert strict.post(url).status_code == 403
    page = strict.get(reverse("researcher:study_detail", args=[alice_study.pk]))
    token = page.cookies["csrftoken"].value
    assert strict.post(url, {"csrfmiddlewaretoken": token}).status_code == 302
    assert Session.objects.get(pk=running.pk).status == "expired"


def test_release_then_expire_from_the_page(client, alice, alice_study, running):
    client.force_login(alice)
    trial = running.trials.order_by("position").first()
    from collector.services.clicks import click_record

    click_record(
        session=running, position=trial.position, idempotency_key="k0", x=10.0, y=10.0,
        shown_width=100.0, shown_height=100.0, pointer_type="mouse", reaction_ms=400.0,
    )  # fmt: skip
    response = client.post(
        reverse("researcher:session_release", args=[alice_study.pk, running.pk]), follow=True
    )
    assert "2 unclicked images given back" in response.content.decode()
    assert _inflight(alice_study) == 1
    response = client.post(
        reverse("researcher:session_release", args=[alice_study.pk, running.pk]), follow=True
    )
    assert "held no slot to give back" in response.content.decode()
    response = client.post(
        reverse("researcher:session_expire", args=[alice_study.pk, running.pk]), follow=True
    )
    assert f"Session {running.pk} expired by alice" in response.content.decode()
    assert _inflight(alice_study) == 0
    running.refresh_from_db()
    assert (running.status, running.ended_by) == ("expired", "researcher")
    response = client.post(
        reverse("researcher:session_expire", args=[alice_study.pk, running.pk]), follow=True
    )
    assert "only a running session can be expired" in response.content.decode()


def test_block_worker_from_the_page_and_the_worker_is_refused(client, alice, alice_study, running):
    client.force_login(alice)
    url = reverse("researcher:worker_block", args=[alice_study.pk, running.worker_id])
    response = client.post(url, {"reason": ""}, follow=True)
    assert "Not blocked: say why" in response.content.decode()
    response = client.post(url, {"reason": "random clicks"}, follow=True)
    page = response.content.decode()
    assert f"Worker {running.worker.pseudonym} blocked by alice" in page and f"{running.pk} expired" in page
    assert _inflight(alice_study) == 0
    worker = Worker.objects.get(pk=running.worker_id)
    assert worker.excluded and "random clicks" in worker.notes


def test_a_blocked_link_worker_is_told_on_the_entry_page(client, alice, alice_study):
    from collector.services.tokens import study_link_token_make

    entry = reverse(
        "annotation_ui:study_link", kwargs={"token": study_link_token_make(study_id=alice_study.pk)}
    )
    annotator = Client()
    assert annotator.post(entry, {"device": "pc"}).status_code == 200
    session = Session.objects.get(study=alice_study)
    client.force_login(alice)
    client.post(
        reverse("researcher:worker_block", args=[alice_study.pk, session.worker_id]), {"reason": "bot-like"}
    )
    again = annotator.post(entry, {"device": "pc"})
    assert (
        again.status_code == 409 and "You cannot take part in this study any more." in again.content.decode()
    )


def test_run_bots_is_refused_on_a_published_study_and_queued_on_a_draft(client, alice, alice_study, dataset):
    from tests.factories import make_study

    client.force_login(alice)
    response = client.post(
        reverse("researcher:study_bots_run", args=[alice_study.pk]), {"bots": "3"}, follow=True
    )
    assert "simulated annotators run on a draft only" in response.content.decode()
    draft = make_study(dataset, owner=alice, batch_size=3, min_valid_per_session=2)
    page = client.get(reverse("researcher:study_detail", args=[draft.pk])).content.decode()
    assert "Run simulated annotators" in page
    response = client.post(reverse("researcher:study_bots_run", args=[draft.pk]), {"bots": "x"}, follow=True)
    assert "bots=&#x27;x&#x27;: how many simulated annotators" in response.content.decode()
    response = client.post(
        reverse("researcher:study_bots_run", args=[draft.pk]), {"bots": "4", "phone_share": "2"}, follow=True
    )
    assert "phone_share=2.0: a share between 0 and 1" in response.content.decode()
    response = client.post(
        reverse("researcher:study_bots_run", args=[draft.pk]),
        {"bots": "4", "leave_share": "0.25"},
        follow=True,
    )
    assert "4 simulated annotators asked for" in response.content.decode()
    intent = TaskIntent.objects.get(task_name="tasks.bots.run_bots")
    assert intent.args[:4] == [draft.pk, 4, 0.5, 0.25]
