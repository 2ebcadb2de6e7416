"""Replay of real collected first clicks, served remotely, equals the local ClickSession's replay clicker."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.django_db


def _box(sample, clicks, shape):
    mask = np.zeros(shape, bool)
    for click in clicks:
        mask[max(int(click.y) - 6, 0) : int(click.y) + 6, max(int(click.x) - 6, 0) : int(click.x) + 6] = True
    return mask


def test_replayed_real_clicks_match_the_local_session(tmp_path, settings, eval_key, wsgi_transport):
    from benchmark.datasets import SampleKey, open_dataset
    from benchmark.session import ClickSession
    from collector.models import Click
    from tests.factories import make_dataset, make_study, make_validated_batch

    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, name="replayset", n_images=3)
    study = make_study(dataset, publish=True, batch_size=3, min_valid_per_session=2)
    make_validated_batch(study, device="pc", valid_positions={0, 1})
    real = {}
    for click in (
        Click.objects.filter(is_valid=True)
        .select_related("trial__target__instance__image")
        .order_by("received_at", "pk")
    ):
        instance = click.trial.target.instance
        key = SampleKey("replayset", instance.image.stem, instance.object_stem)
        real[key] = np.vstack([real.get(key, np.zeros((0, 2))), [[click.x, click.y]]])
    assert sum(len(v) for v in real.values()) == 2

    local_ds = open_dataset(tmp_path / "replayset", "folder", name="replayset")
    reports = []
    for where in ({"dataset": local_ds, "real_clicks": real},
                  {"dataset": "replayset", "host": "http://testserver", "key": eval_key, "transport": wsgi_transport}):  # fmt: skip
        with ClickSession(clicker="replay", max_clicks=3, **where) as sess:
            while sess.next():
                sample, clicks, _ = sess.get_clicks()
                shape = sample.load_image().shape[:2]
                sess.submit_masks(_box(sample, clicks, shape))
        reports.append(sess.get_report().drop(columns=["timing_s", "session_id"]))
    pd.testing.assert_frame_equal(reports[0], reports[1])
    assert list(reports[1]["group"]) == ["user1", "user1"] and (reports[1]["clicker"] == "replay").all()
