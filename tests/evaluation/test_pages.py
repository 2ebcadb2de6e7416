"""Leaderboard in the researcher area (Table-4 columns, mIoU-vs-clicks plot, keys shown once) and the
public read-only page of a published benchmark."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytestmark = [pytest.mark.dataset, pytest.mark.django_db]


def test_leaderboard_keys_and_public_page(client, researcher, eval_dataset, eval_key, wsgi_transport):
    from benchmark.session import ClickSession
    from evaluation.models import EvaluationKey

    with ClickSession(host="http://testserver", key=eval_key, transport=wsgi_transport, dataset="GrabCut",
                      max_clicks=2, method="disk-model") as sess:  # fmt: skip
        while sess.next():
            sample, clicks, _ = sess.get_clicks()
            mask = np.zeros((sample.height, sample.width), bool)
            mask[sample.height // 4 : 3 * sample.height // 4, sample.width // 4 : 3 * sample.width // 4] = (
                True
            )
            sess.submit_masks(mask)
    summary = sess.get_global_summary()

    assert client.get("/eval/leaderboard/").status_code == 302  # login first
    client.force_login(researcher)
    page = client.get("/eval/leaderboard/").content.decode()
    for column in (
        "NoC@85",
        "NoC@90",
        "NoF@85",
        "IoU-AuC",
        "ΔSB",
        "ΔGR",
        "ΔHH",
        "disk-model",
        "<svg",
        "<polyline",
    ):
        assert column in page, column
    assert f"{summary['noc']['85']:.2f}" in page and f"{summary['iou_auc']:.3f}" in page

    response = client.post("/eval/keys/new/", {"name": "laptop"}, follow=True)
    raw = re.search(r"(ek_[A-Za-z0-9_-]{20,})", response.content.decode())[1]
    assert EvaluationKey.objects.filter(name="laptop").count() == 1
    assert raw not in client.get("/eval/leaderboard/").content.decode()  # shown once

    client.post("/eval/publish/", {"dataset": eval_dataset.pk, "title": "GrabCut subset", "max_clicks": 2})
    client.logout()
    public = client.get("/eval/b/grabcut-subset/")
    assert public.status_code == 200 and "No finished runs yet" in public.content.decode()  # none on it yet
    with ClickSession(host="http://testserver", key=eval_key, transport=wsgi_transport, benchmark="grabcut-subset",
                      method="disk-model-on-benchmark") as sess:  # fmt: skip
        while sess.next():
            sample, clicks, _ = sess.get_clicks()
            sess.submit_masks(np.ones((sample.height, sample.width), bool))
    public = client.get("/eval/b/grabcut-subset/").content.decode()
    assert "disk-model-on-benchmark" in public and "disk-model<" not in public and "ek_" not in public
    assert "server, verified" in public and "evaluator" in public  # the participant: the username by default
    assert client.get("/eval/b/nope/").status_code == 404
