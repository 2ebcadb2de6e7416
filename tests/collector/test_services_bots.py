"""Simulated annotators (issue 32 item 4): ``manage.py study_bots`` plays a draft over HTTP against a live
server, through the real player protocol, PC and phone, some leaving mid-batch; the real Celery worker validates
them; nothing of theirs reaches a quota or any export file's bytes; one call removes them; publishing then
gives real workers the full quotas."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from collector.models import Click, Session, Study, Target, Trial, Worker
from collector.services.bots import BOT_PLATFORM, bot_summary, bots_remove
from collector.services.session_start import session_start
from collector.services.studies import study_publish
from collector.services.tokens import study_link_token_make
from exports.full import full_export, manifest_path_of
from exports.rclicks import rclicks_export
from tests.factories import make_clicked_session, make_rect_dataset, make_study, make_worker

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def _wait_validated(study, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    pending = Session.objects.filter(study=study, status="finished", validated_at__isnull=True)
    while pending.exists():
        assert time.monotonic() < deadline, (
            f"{pending.count()} bot batches still unvalidated after {timeout_s} s"
        )
        time.sleep(0.5)


def _all_export_bytes(study, tmp_path) -> bytes:
    out = tmp_path / "rclicks"
    rclicks_export(study_ids=[study.pk], out_dir=out, include_invalid=True)
    blobs = [path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()]
    for suffix in ("jsonl", "parquet"):
        path = tmp_path / f"full.{suffix}"
        try:
            full_export(study_ids=[study.pk], out_path=path)
        except Exception as exc:  # parquet without pyarrow: say so, the jsonl is still checked
            assert suffix == "parquet" and "pyarrow" in str(exc), exc
            continue
        blobs += [path.read_bytes(), manifest_path_of(path).read_bytes()]
    return b"".join(blobs)


def test_study_bots_play_a_draft_over_http_and_leave_no_trace_but_their_verdicts(
    live_server, celery_worker, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
    celery_worker.follow_media_root()
    dataset = make_rect_dataset(tmp_path, n_images=6)
    study = make_study(
        dataset,
        batch_size=3,
        min_valid_per_session=2,
        quota_pc=2,
        quota_mobile=2,
        image_ms=100,
        target_ms=100,
        blocked_ms=100,
    )
    # a real worker is refused on the draft
    entry = reverse("annotation_ui:study_link", kwargs={"token": study_link_token_make(study_id=study.pk)})
    refused = Client().post(entry, {"device": "pc"})
    assert refused.status_code == 409 and "not open" in refused.content.decode()

    out = io.StringIO()
    call_command(
        "study_bots",
        study=study.pk,
        bots=6,
        phone_share=0.5,
        leave_share=0.34,
        base_url=live_server.url,
        seed=3,
        json=True,
        stdout=out,
    )
    text = out.getvalue()
    report = json.loads(text[: text.rindex("}") + 1])
    assert report["summary"] == {
        **report["summary"],
        "bots": 6,
        "pc": 3,
        "mobile": 3,
        "finished": 4,
        "left": 2,
    }
    assert report["summary"]["errors"] == [] and report["summary"]["refused"] == 0
    assert "6 simulated annotators (3 pc, 3 phone): 4 finished, 2 left mid-batch" in text

    sessions = Session.objects.filter(study=study)
    assert sessions.count() == 6 and not sessions.filter(is_bot=False).exists()
    assert set(Worker.objects.filter(sessions__study=study).values_list("platform", flat=True)) == {
        BOT_PLATFORM
    }
    assert set(sessions.values_list("device", flat=True)) == {"pc", "mobile"}
    phone = sessions.filter(device="mobile").first()
    assert "Android" in phone.user_agent and phone.client_info.get("bot") is True
    leavers = sessions.filter(status="started")
    assert leavers.count() == 2
    leaver_clicks = 0
    for leaver in leavers:
        clicked = Click.objects.filter(trial__session=leaver).count()
        assert 1 <= clicked < 3, clicked
        leaver_clicks += clicked
    _wait_validated(study)
    assert sessions.filter(status="finished").exclude(validity="pending").count() == 4

    # quotas: nothing added; in flight exactly what the two leavers' batches still hold
    targets = Target.objects.filter(round__study=study)
    assert sum(t.valid_pc + t.valid_mobile for t in targets) == 0
    held = Trial.objects.filter(session__in=leavers, role="task", holds_slot=True).count()
    assert held == 6 and sum(t.inflight_pc + t.inflight_mobile for t in targets) == held

    summary = bot_summary(study=Study.objects.get(pk=study.pk))
    assert (
        summary["started"] == 6
        and summary["counted"] + summary["rejected"] == 4
        and summary["in_progress"] == 2
    )

    # one real worker's counted click, so the exports have a row; no bot byte in any export file
    real_target = targets.order_by("pk").first()
    make_clicked_session(
        study, clicks=[(real_target, 200.5, 150.5)], worker=make_worker(external_id="real-1")
    )
    exported = _all_export_bytes(study, tmp_path)
    assert b"real-1" not in exported  # the platform id never leaves the database either
    real = Session.objects.get(is_bot=False)
    assert real.worker.pseudonym.encode() in exported
    for bot in sessions.filter(is_bot=True).select_related("worker"):
        assert bot.worker.pseudonym.encode() not in exported, bot.pk
        assert b"ClicklabBot" not in exported
    assert b'"rule": "valid"' in exported  # every export names the batch rule (item 7)
    clicks_csv = (tmp_path / "rclicks" / "clicks.csv").read_text().splitlines()
    assert len(clicks_csv) == 2  # the header and the real click

    removed = bots_remove(study_id=study.pk)
    assert removed == {"sessions": 6, "trials": 18, "clicks": 4 * 3 + leaver_clicks, "workers": 6}
    assert not Session.objects.filter(is_bot=True).exists()
    assert not Worker.objects.filter(platform=BOT_PLATFORM).exists()
    targets = Target.objects.filter(round__study=study)
    assert sum(t.inflight_pc + t.inflight_mobile for t in targets) == 0
    assert sum(t.valid_pc + t.valid_mobile for t in targets) == 0

    # publishing: a real worker now gets a full batch; bot links are refused on a published study
    study_publish(study_id=study.pk)
    session = session_start(study=Study.objects.get(pk=study.pk), worker=make_worker(), device="mobile")
    assert session.trials.count() == 3 and not session.is_bot
