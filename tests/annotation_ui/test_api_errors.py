"""Issue 19: the annotator API's documented JSON 404 for a bad token (the module docstring of api.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from collector.services.tokens import session_token_make

pytestmark = pytest.mark.django_db

FORGED = "eyJzIjoxfQ:1xVTne:" + "A" * 43
_CLICK = {
    "position": 0,
    "idempotency_key": "k-404",
    "x": 1.0,
    "y": 1.0,
    "shown_width": 10.0,
    "shown_height": 10.0,
}


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_a_bad_or_unknown_token_gets_the_apis_json_404_on_every_endpoint(settings, debug):
    settings.DEBUG = debug
    client = Client()
    for token in (FORGED, "not-a-token", session_token_make(session_id=987654321)):
        for method, path in (
            ("get", "state"), ("post", "client"), ("post", "click"), ("post", "finish"), ("post", "presented"),
            ("get", "stimulus/0/display/x.webp"), ("get", "stimuli/abc.bin"),
        ):  # fmt: skip
            # the click and presented endpoints read the session after validating the body (their hot path),
            # so they get a well-formed body: a token naming no session is still a 404
            body = {"click": _CLICK, "presented": {"position": 0, "presentation_id": "p-0"}}.get(path)
            response = getattr(client, method)(
                f"/api/annotator/{token}/{path}", data=body, content_type="application/json"
            )
            assert response.status_code == 404, (token, path)
            assert response["Content-Type"] == "application/json", (token, path, response.content[:200])
            error = response.json()["message"]
            assert error.endswith("open the task again from the platform."), error
    # pages outside the API keep their HTML messages
    page = client.get(f"/a/{FORGED}/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
