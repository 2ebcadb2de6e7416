"""Validation: the radius rule (exactly on the radius, ignore band, outside the image), the 7-of-10 rule,
counters, idempotency. Geometry is checked against scipy's distance transform; sessions go through the
real start/click/finish services."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.ndimage import distance_transform_edt

from collector.models import Click, Session, Target
from collector.services.clicks import click_record
from collector.services.session_finish import session_finish
from collector.services.session_start import session_start
from collector.services.validation import (
    click_verdict,
    region_distance_px,
    required_valid_clicks,
    session_validate,
)
from tests.factories import (
    make_correction_round,
    make_correction_target,
    make_rect_dataset,
    make_study,
    make_worker,
    present_trials,
)

# --------------------------------------------------------------------------------------------------
# geometry


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_region_distance_equals_the_euclidean_distance_transform(seed):
    rng = np.random.default_rng(seed)
    region = np.zeros((37, 53), dtype=bool)
    for _ in range(rng.integers(1, 4)):
        r, c = rng.integers(0, 37), rng.integers(0, 53)
        region[r : r + rng.integers(1, 6), c : c + rng.integers(1, 9)] = True
    expected = distance_transform_edt(~region)
    got = np.array([[region_distance_px(region=region, row=r, col=c) for c in range(53)] for r in range(37)])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_region_distance_outside_the_image_and_for_an_empty_region():
    region = np.zeros((10, 20), dtype=bool)
    region[4, 0] = True
    assert region_distance_px(region=region, row=4, col=-3) == 3.0
    assert region_distance_px(region=region, row=1, col=-4) == 5.0  # 3-4-5 from (4, 0)
    assert region_distance_px(region=np.zeros((10, 20), dtype=bool), row=3, col=3) == math.inf


def _square(size=100, lo=40, hi=59):
    region = np.zeros((size, size), dtype=bool)
    region[lo : hi + 1, lo : hi + 1] = True
    return region


def test_click_exactly_on_the_radius_counts_and_one_pixel_beyond_does_not():
    region = _square()
    on = click_verdict(x=59 + 3 + 0.9, y=59 + 4 + 0.2, region=region, ignore=None, radius_px=5.0)
    assert (on.is_valid, on.distance_px, on.invalid_reason) == (True, 5.0, "")
    beyond = click_verdict(x=59 + 6 + 0.5, y=50.5, region=region, ignore=None, radius_px=5.0)
    assert (beyond.is_valid, beyond.distance_px, beyond.invalid_reason) == (False, 6.0, "outside_region")


def test_ignore_band_is_never_region():
    region = _square()
    ignore = np.zeros_like(region)
    ignore[30:70, 30:70] = True
    ignore &= ~region
    near = click_verdict(x=62.5, y=50.5, region=region, ignore=ignore, radius_px=5.0)  # 3 px, in the band
    assert near.is_valid and near.distance_px == 3.0
    far = click_verdict(x=68.5, y=50.5, region=region, ignore=ignore, radius_px=5.0)  # 9 px, in the band
    assert (far.is_valid, far.distance_px, far.invalid_reason) == (False, 9.0, "ignore_band")


@pytest.mark.parametrize("x, y", [(100.0, 50.0), (-0.01, 50.0), (50.0, 100.0), (50.0, -3.0)])
def test_click_outside_the_image_is_invalid_even_next_to_the_region(x, y):
    region = np.ones((100, 100), dtype=bool)
    verdict = click_verdict(x=x, y=y, region=region, ignore=None, radius_px=50.0)
    assert (verdict.is_valid, verdict.invalid_reason) == (False, "outside_image")


def test_flagged_trial_is_invalid_inside_the_region():
    verdict = click_verdict(x=50, y=50, region=_square(), ignore=None, radius_px=5.0, trial_flagged=True)
    assert (verdict.is_valid, verdict.distance_px, verdict.invalid_reason) == (False, 0.0, "trial_flagged")


@pytest.mark.parametrize(
    "min_valid, batch, trials", [(7, 10, 10), (7, 10, 4), (7, 10, 2), (4, 5, 1), (0, 10, 5)]
)
def test_required_valid_clicks_never_scales_down_for_short_batches(min_valid, batch, trials):
    """Issue 32 item 2: a batch is never counted below the rule (a 2-trial batch of a 7-valid study is not)."""
    assert (
        required_valid_clicks(min_valid_per_session=min_valid, batch_size=batch, n_trials=trials) == min_valid
    )


# --------------------------------------------------------------------------------------------------
# sessions through the real services

# Rect (150..249, 100..199) in 400x300 images (diagonal 500 px: r = 5 px at 1 %), ignore band 10 px wide.
CENTRE = (200.5, 150.5, 0.0, True, "")
ON_RADIUS = (
    254.5,
    150.5,
    5.0,
    True,
    "",
)  # col 254: 5 px right of col 249 (inside the band: band is no region)
ON_RADIUS_DIAGONAL = (252.9, 203.1, 5.0, True, "")  # (252, 203): 3 right, 4 below the corner (249, 199)
IN_BAND_BEYOND = (255.2, 150.5, 6.0, False, "ignore_band")
FAR = (280.5, 150.5, 31.0, False, "outside_region")
OUTSIDE_IMAGE = (400.0, 150.5, 151.0, False, "outside_image")


def _finished_session(study, plan, *, device="pc", flagged_positions=()):
    """One batch by a new worker; ``plan[position]`` = (x, y, ...) of the click."""
    session = session_start(study=study, worker=make_worker(), device=device)
    present_trials(session)
    for trial in session.trials.select_related("target__instance__image"):
        x, y = plan[trial.position][:2]
        click_record(
            session=session,
            position=trial.position,
            idempotency_key=f"v-{session.pk}-{trial.position}",
            x=x,
            y=y,
            shown_width=400.0,
            shown_height=300.0,
            pointer_type="mouse" if device == "pc" else "touch",
            reaction_ms=500.0,
            flags=["visibilitychange:hidden"] if trial.position in flagged_positions else [],
        )
    return session_finish(session_id=session.pk)


@pytest.fixture
def rect_study(tmp_path):
    dataset = make_rect_dataset(tmp_path, n_images=10, ignore_width=10)
    return make_study(dataset, publish=True, quota_pc=5, quota_mobile=5)


@pytest.mark.django_db
def test_seven_of_ten_counts_and_stores_every_verdict(rect_study):
    plan = [
        CENTRE,
        ON_RADIUS,
        ON_RADIUS_DIAGONAL,
        CENTRE,
        CENTRE,
        CENTRE,
        CENTRE,
        IN_BAND_BEYOND,
        OUTSIDE_IMAGE,
        FAR,
    ]
    session = _finished_session(rect_study, plan)
    session_validate(session_id=session.pk)

    session.refresh_from_db()
    assert (session.validity, session.valid_clicks, session.rejection_reason) == ("counted", 7, "")
    assert session.validated_at is not None
    for click in Click.objects.filter(trial__session=session).select_related("trial"):
        _, _, distance, valid, reason = plan[click.trial.position]
        assert (click.is_valid, click.distance_px, click.invalid_reason) == (valid, distance, reason), click
    valid_targets = set(
        Click.objects.filter(trial__session=session, is_valid=True).values_list("trial__target_id", flat=True)
    )
    for target in Target.objects.filter(round=session.round):
        assert target.inflight_pc == 0
        assert target.valid_pc == (1 if target.pk in valid_targets else 0)
        assert target.valid_mobile == 0


@pytest.mark.django_db
def test_six_of_ten_is_rejected_and_adds_nothing_to_quotas(rect_study):
    plan = [CENTRE] * 5 + [ON_RADIUS, IN_BAND_BEYOND, OUTSIDE_IMAGE, FAR, FAR]
    session = _finished_session(rect_study, plan, device="mobile")
    session_validate(session_id=session.pk)
    session.refresh_from_db()
    assert (session.validity, session.valid_clicks) == ("rejected", 6)
    assert "6 of 10" in session.rejection_reason and "at least 7" in session.rejection_reason
    assert Click.objects.filter(trial__session=session, is_valid=True).count() == 6
    assert (
        sorted(Target.objects.filter(round=session.round).values_list("valid_mobile", "inflight_mobile"))
        == [(0, 0)] * 10
    )


@pytest.mark.django_db
def test_flagged_trials_are_invalid_and_can_tip_the_batch(rect_study):
    session = _finished_session(rect_study, [CENTRE] * 10, flagged_positions={0, 1, 2, 3})
    session_validate(session_id=session.pk)
    session.refresh_from_db()
    assert (session.validity, session.valid_clicks) == ("rejected", 6)
    reasons = Click.objects.filter(trial__session=session, is_valid=False).values_list(
        "invalid_reason", flat=True
    )
    assert sorted(reasons) == ["trial_flagged"] * 4
    # every click at the rect's centre, and the rect is at the same place in every image
    assert {flag["code"] for flag in session.quality_flags} == {"tab_hidden", "identical_positions"}


@pytest.mark.django_db
def test_validation_runs_once(rect_study):
    session = _finished_session(rect_study, [CENTRE] * 10)
    first = session_validate(session_id=session.pk)
    again = session_validate(session_id=session.pk)
    assert again.validated_at == first.validated_at
    assert sorted(Target.objects.filter(round=session.round).values_list("valid_pc", flat=True)) == [1] * 10


@pytest.mark.django_db
def test_running_expired_and_missing_sessions_are_left_alone(rect_study):
    running = session_start(study=rect_study, worker=make_worker(), device="pc")
    assert session_validate(session_id=running.pk).validated_at is None
    Session.objects.filter(pk=running.pk).update(status=Session.Status.EXPIRED)
    assert session_validate(session_id=running.pk).validated_at is None
    assert session_validate(session_id=10**9) is None
    assert (
        sorted(Target.objects.filter(round=running.round).values_list("inflight_pc", flat=True)) == [1] * 10
    )


@pytest.mark.django_db
def test_a_short_batch_is_never_counted_below_the_rule(tmp_path):
    """A tail batch of 4 (short_batches=tail) needs the study's full 4 valid clicks: 3 of 4 is not counted, and
    adds nothing to the quotas, though the scaled rule of old (ceil(4 * 4 / 10) = 2) would have counted it."""
    dataset = make_rect_dataset(tmp_path, n_images=4)
    study = make_study(dataset, publish=True, short_batches="tail", min_valid_per_session=4)
    session = _finished_session(study, [CENTRE, CENTRE, CENTRE, FAR])
    assert session.trials.count() == 4
    session_validate(session_id=session.pk)
    session.refresh_from_db()
    assert (session.validity, session.valid_clicks) == ("rejected", 3)
    assert "the study needs at least 4" in session.rejection_reason
    assert sum(Target.objects.values_list("valid_pc", flat=True)) == 0
    assert sum(Target.objects.values_list("inflight_pc", flat=True)) == 0

    counted = _finished_session(study, [CENTRE, CENTRE, CENTRE, CENTRE])
    session_validate(session_id=counted.pk)
    counted.refresh_from_db()
    assert (counted.validity, counted.valid_clicks) == ("counted", 4)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "click_type, inside, outside",
    [("fn", (220.5, 150.5), (180.5, 150.5)), ("fp", (120.5, 150.5), (180.5, 150.5))],
)
def test_correction_targets_use_the_error_region(tmp_path, click_type, inside, outside):
    """Previous mask P = the left half (x < 200); object M = the rect. fn region: M & ~P = the rect's right
    half; fp region: ~M & P = the left half outside the rect."""
    dataset = make_rect_dataset(tmp_path, n_images=1)
    study = make_study(dataset, publish=True, batch_size=1, min_valid_per_session=1)
    study.rounds.update(state="closed")
    round_2 = make_correction_round(study)
    instance = dataset.images.get().instances.get()
    make_correction_target(
        round_2, instance=instance, click_type=click_type, source_device="pc", source_index=0
    )

    valid = _finished_session(study, [inside])
    invalid = _finished_session(study, [outside])
    for session in (valid, invalid):
        session_validate(session_id=session.pk)
    assert Click.objects.get(trial__session=valid).is_valid is True
    click = Click.objects.get(trial__session=invalid)
    assert (click.is_valid, click.invalid_reason) == (False, "outside_region")
    assert click.distance_px > 5


# --------------------------------------------------------------------------------------------------
# the batch rule (issue 32 item 7): valid clicks or clicks inside the object


@pytest.mark.django_db
def test_the_batch_rule_valid_and_inside_judge_the_same_clicks_differently(tmp_path):
    dataset = make_rect_dataset(tmp_path, n_images=10)
    # 5 inside, 3 within the radius outside the rectangle (valid, not inside), 2 far: 8 valid, 5 inside
    plan = [CENTRE] * 5 + [ON_RADIUS] * 3 + [FAR] * 2
    verdicts = {}
    for rule in ("valid", "inside"):
        study = make_study(dataset, publish=True, batch_rule=rule, quota_pc=5, quota_mobile=5)
        session = _finished_session(study, plan)
        session_validate(session_id=session.pk)
        session.refresh_from_db()
        verdicts[rule] = (session.validity, session.valid_clicks, session.rejection_reason)
        counted_targets = Target.objects.filter(round__study=study, valid_pc=1).count()
        # a click's validity does not change with the rule: a counted batch adds its 8 valid clicks
        assert counted_targets == (8 if rule == "valid" else 0), rule
    assert verdicts["valid"] == ("counted", 8, "")
    assert verdicts["inside"] == (
        "rejected",
        8,
        "5 of 10 clicks were inside the object (batch rule “inside”); the study needs at least 7.",
    )


@pytest.mark.django_db
def test_a_simulated_annotators_counted_batch_adds_nothing_to_a_quota(tmp_path):
    dataset = make_rect_dataset(tmp_path, n_images=10)
    study = make_study(dataset, publish=True, quota_pc=5, quota_mobile=5)
    session = _finished_session(study, [CENTRE] * 10)
    Session.objects.filter(pk=session.pk).update(is_bot=True)
    session_validate(session_id=session.pk)
    session.refresh_from_db()
    assert session.validity == "counted"
    targets = Target.objects.filter(round__study=study)
    assert sum(t.valid_pc for t in targets) == 0 and sum(t.inflight_pc for t in targets) == 0


def test_the_mask_cache_keeps_the_most_recently_used_masks_within_its_pixel_budget(tmp_path, settings):
    import io

    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage
    from PIL import Image as PILImage

    from collector.services.validation import _MaskCache

    settings.MEDIA_ROOT = tmp_path / "media"

    def save(name: str, size: tuple[int, int]) -> str:
        buffer = io.BytesIO()
        PILImage.new("L", size, 255).save(buffer, format="PNG")
        return default_storage.save(name, ContentFile(buffer.getvalue()))

    a, b, c = save("a.png", (10, 10)), save("b.png", (10, 10)), save("c.png", (10, 10))
    huge = save("huge.png", (30, 30))
    cache = _MaskCache(max_pixels=250)  # two 100-pixel masks fit, not three
    first = cache.get(a)
    assert (
        first.shape == (10, 10) and first.all() and cache.get(a) is first
    )  # the second read is the cached one
    cache.get(b)
    cache.get(a)  # a is now the most recently used
    cache.get(c)  # evicts b, the least recently used
    assert cache.get(a) is first
    assert set(cache._items) == {a, c}
    assert cache.get(huge).shape == (30, 30) and huge not in cache._items  # beyond the budget: read, not kept
    default_storage.delete(c)
    assert cache.get(c).all()  # still served from memory
