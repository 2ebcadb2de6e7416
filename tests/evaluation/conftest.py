"""Fixtures of the evaluation-server tests: the 3-image GrabCut subset (tests/conftest.py) imported into the test database, an
evaluation key, and the real remote client talking to the Django app in-process (httpx WSGI transport)."""

from __future__ import annotations

import pytest


@pytest.fixture
def eval_dataset(grabcut3):
    from collector.services.datasets import dataset_import

    return dataset_import(path=grabcut3, layout="grabcut").dataset


@pytest.fixture
def researcher():
    from tests.factories import make_researcher

    return make_researcher("evaluator")


@pytest.fixture
def eval_key(researcher) -> str:
    from evaluation.services import create_key

    return create_key(user=researcher, name="tests")[1]


@pytest.fixture
def wsgi_transport():
    """httpx straight into the Django app; like Django's test client, requests keep the test's DB connection
    (each request runs with Django's close_old_connections disconnected, as the test client's do, so the two
    can be used in either order)."""
    import httpx
    from django.core.signals import request_finished, request_started
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    class KeepConnection(httpx.WSGITransport):
        def handle_request(self, request):
            request_started.disconnect(close_old_connections)
            request_finished.disconnect(close_old_connections)
            try:
                response = super().handle_request(request)
                response.read()
                return response
            finally:
                request_started.connect(close_old_connections)
                request_finished.connect(close_old_connections)

    return KeepConnection(app=get_wsgi_application())


@pytest.fixture
def fast_predictor():
    """The embedded segmenter at a small working size, so a whole run takes well under a second."""
    from segmenters.registry import get_predictor

    return get_predictor("embedded", work_long_side_px=96, grabcut_iterations=1)


def run_script(predictor, **where):
    """The user's script, unchanged between local and remote: returns (report, summary, results)."""
    import cv2

    from benchmark.session import ClickSession

    cv2.setRNGSeed(0)  # OpenCV's GrabCut (k-means init) draws from OpenCV's global RNG: same draws both times
    results = []
    with ClickSession(clicker="baseline", max_clicks=3, seed=0, **where) as sess:
        embedding = None
        while sess.next():
            sample, clicks, is_new = sess.get_clicks()
            if is_new:
                embedding = predictor.encode(sample.load_image())
            results.append(sess.submit_masks(predictor.predict(embedding, clicks).probabilities))
        return sess.get_report(), sess.get_global_summary(), results


@pytest.fixture(autouse=True)
def _fresh_sample_caches():
    """The server caches GT and sizes per instance id; test databases may reuse ids."""
    from evaluation import services

    clear_sample_caches(services)


def clear_sample_caches(services) -> None:
    """Forget what a server process caches per instance (GT, sizes, images, round-1 maps and caches, click models)."""
    for cached in (services._truth, services._size, services._image, services._first_round,
                   services._click_model, services.sample_image_png):  # fmt: skip
        cached.cache_clear()
    services._known_keys.clear()
