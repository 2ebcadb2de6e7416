"""The remote ClickSession against the evaluation server gives the local session's report and summary,
and no response of a whole run carries ground-truth pixels."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pandas as pd
import pytest

from benchmark.datasets import open_dataset
from benchmark.maskcodec import encode_png, encode_rle, rle_counts

from .conftest import run_script

pytestmark = [pytest.mark.dataset, pytest.mark.django_db]
VOLATILE = ["timing_s", "session_id"]


def assert_same(local, remote):
    (l_report, l_summary, l_results), (r_report, r_summary, r_results) = local, remote
    assert len(l_report) == 9 and set(l_report["sample_id"]) == {"106024", "227092", "teddy"}
    pd.testing.assert_frame_equal(l_report.drop(columns=VOLATILE), r_report.drop(columns=VOLATILE))
    assert (r_report["session_id"] == r_summary["session_id"]).all()
    for summary in (l_summary, r_summary):
        (
            summary.pop("session_id"),
            summary.pop("seconds_per_click"),
            summary.pop("time_curve"),
            summary.pop("time_auc"),
        )
    assert json.dumps(l_summary, sort_keys=True) == json.dumps(r_summary, sort_keys=True)
    assert [(r.status, r.iou, r.round, r.clicks) for r in l_results] == [
        (r.status, r.iou, r.round, r.clicks) for r in r_results
    ]


class Recording(httpx.BaseTransport):
    def __init__(self, inner):
        self.inner, self.bodies = inner, []

    def handle_request(self, request):
        response = self.inner.handle_request(request)
        response.read()
        self.bodies.append(response.content)
        return response


def test_same_script_local_and_remote_and_no_ground_truth_in_any_response(
    grabcut3, eval_dataset, eval_key, wsgi_transport, fast_predictor
):
    local_ds = open_dataset(grabcut3, "grabcut")
    local = run_script(fast_predictor, dataset=local_ds)
    recording = Recording(wsgi_transport)
    remote = run_script(
        fast_predictor, dataset=local_ds, host="http://testserver", key=eval_key, transport=recording
    )
    assert_same(local, remote)

    # Every response of the run (create, next, 9 submits carrying the next interaction, 3 images, summary,
    # report) against every GT encoding.
    assert len(recording.bodies) >= 15
    needles = []
    for sample in local_ds.samples:
        gt, _ = sample.load_masks()
        png = encode_png(gt)
        rle = encode_rle(gt)["counts"]
        needles += [
            png[40:200],
            base64.b64encode(png)[60:200],
            rle[:80].encode(),
            json.dumps(rle_counts(gt)[:12])[1:-1].encode(),
        ]
        needles.append(np.packbits(gt).tobytes()[len(gt) // 2 : len(gt) // 2 + 64])
    for body in recording.bodies:
        for needle in needles:
            assert needle not in body, "a response carries ground truth"


@pytest.mark.celery
@pytest.mark.one_backend
@pytest.mark.django_db(transaction=True)
def test_same_script_against_a_live_server_scoring_in_a_real_celery_worker(
    grabcut3, eval_dataset, eval_key, fast_predictor, live_server, celery_worker, settings
):
    from evaluation.models import EvaluationRun

    settings.EVAL_INLINE_MAX_PIXELS = 0  # every submission goes to the worker; the client polls
    local_ds = open_dataset(grabcut3, "grabcut")
    local = run_script(fast_predictor, dataset=local_ds)
    remote = run_script(
        fast_predictor,
        dataset=local_ds,
        host=live_server.url,
        key=eval_key,
        method="embedded",
        poll_timeout_s=120,
    )
    assert_same(local, remote)
    run = EvaluationRun.objects.get()
    assert run.state == "finished" and run.scored_async == 9, celery_worker.log()[-3000:]


def readme_loop(predictor, **where):
    """The benchmark README's loop: the Prediction is submitted whole, its logits fed back next round."""
    from benchmark.session import ClickSession

    with ClickSession(clicker="baseline", max_clicks=3, seed=0, **where) as sess:
        while sess.next():
            sample, clicks, is_new = sess.get_clicks(only_last=False)
            if is_new:
                embedding = predictor.encode(sample.load_image())
            prediction = predictor.predict(embedding, clicks, sess.previous_logits)
            sess.submit_masks(prediction)
    return sess.get_report(), sess.get_global_summary()


def test_the_readme_loop_with_previous_logits_gives_the_local_report_remotely(
    grabcut3, eval_dataset, eval_key, wsgi_transport, fast_predictor
):
    local_ds = open_dataset(grabcut3, "grabcut")
    local_report, local_summary = readme_loop(fast_predictor, dataset=local_ds)
    remote_report, remote_summary = readme_loop(
        fast_predictor, host="http://testserver", key=eval_key, transport=wsgi_transport, dataset="GrabCut"
    )
    pd.testing.assert_frame_equal(local_report.drop(columns=VOLATILE), remote_report.drop(columns=VOLATILE))
    assert (
        local_summary["noc"] == remote_summary["noc"]
        and local_summary["miou_curve"] == remote_summary["miou_curve"]
    )
    # the logits matter to this method: leaving them out gives another report
    from benchmark.session import ClickSession

    with ClickSession(dataset=local_ds, clicker="baseline", max_clicks=3, seed=0) as sess:
        while sess.next():
            sample, clicks, is_new = sess.get_clicks()
            if is_new:
                embedding = fast_predictor.encode(sample.load_image())
            sess.submit_masks(fast_predictor.predict(embedding, clicks, None))
    assert not sess.get_report()["iou"].equals(local_report["iou"])


class Latency(httpx.BaseTransport):
    """A slow network: every request waits ``seconds`` before it reaches the server."""

    def __init__(self, inner, seconds: float):
        self.inner, self.seconds = inner, seconds

    def handle_request(self, request):
        import time

        time.sleep(self.seconds)
        return self.inner.handle_request(request)


def test_max_time_s_is_the_methods_time_remotely_as_locally_not_the_networks(
    grabcut3, eval_dataset, eval_key, wsgi_transport
):
    """A method taking 0.2 s a round under a 0.5 s budget: two rounds count, the third times out, on both sides,
    although each remote round also spends 0.15 s on the network (the server's clock alone ends at round 2)."""
    import time

    from benchmark.session import ClickSession

    local_ds = open_dataset(grabcut3, "grabcut")
    shapes = {sample.key.image_stem: sample.load_masks()[0].shape for sample in local_ds.samples}

    def timed(**where):
        with ClickSession(clicker="baseline", max_clicks=5, max_time_s=0.5, seed=0, **where) as sess:
            while sess.next():
                sample, clicks, _ = sess.get_clicks()
                time.sleep(0.2)  # the method
                sess.submit_masks(np.zeros(shapes[sample.key.image_stem], bool))
        return sess.get_report()

    local = timed(dataset=local_ds)
    remote = timed(
        host="http://testserver", key=eval_key, dataset="GrabCut", transport=Latency(wsgi_transport, 0.15)
    )
    for report in (local, remote):
        assert (
            report.groupby("sample_id")["status"].apply(list).tolist()
            == [["accepted", "accepted", "timed_out"]] * 3
        )
    pd.testing.assert_frame_equal(local.drop(columns=VOLATILE), remote.drop(columns=VOLATILE))
    assert (remote["timing_s"] >= 0.2).all() and (remote["timing_s"] < 0.35).all()


@pytest.mark.django_db
def test_a_refusal_reaches_the_remote_client_as_a_readable_error_with_the_envelopes_code(
    eval_dataset, eval_key, wsgi_transport
):
    """Issue 35: the server answers the error envelope; the remote session's RemoteError carries its status,
    code, message and field, and says them in one line."""
    from benchmark.remote import RemoteError
    from benchmark.session import ClickSession

    where = dict(host="http://testserver", transport=wsgi_transport)
    with pytest.raises(RemoteError) as refused:
        ClickSession(**where, key=eval_key, dataset="NoSuchDataset").__enter__()
    error = refused.value
    assert (error.status, error.code) == (400, "unknown_dataset")
    assert "NoSuchDataset" in error.message and "GrabCut" in error.message
    assert str(error).startswith("HTTP 400 unknown_dataset: ") and error.message in str(error)
    with pytest.raises(RemoteError) as unknown_key:
        ClickSession(**where, key="ek_not-a-key", dataset="GrabCut").__enter__()
    assert (unknown_key.value.status, unknown_key.value.code) == (401, "authentication_failed")
    assert "create a new one" in str(unknown_key.value)
