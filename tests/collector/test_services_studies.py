"""collector.services.studies and the preview's batch (collector.selectors.preview) on the real database."""

from __future__ import annotations

import pytest

from collector.models import Round, Study, Target
from collector.selectors.preview import preview_click_check, preview_targets
from collector.services.allocation import target_candidates
from collector.services.launch import study_go_live, study_halt
from collector.services.session_start import SessionStartRefused, session_start
from collector.services.studies import StudyStateError, study_preview_round, study_publish
from tests.factories import make_dataset, make_rect_dataset, make_study, make_validated_batch, make_worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def media(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return tmp_path


@pytest.fixture
def crowded(media):
    """5 images with 3 objects each (like the demo's astronaut): a batch of 4 must show 4 different images."""
    dataset = make_dataset(media, n_images=5, objects_per_image=3, size=(120, 90))
    return make_study(
        dataset, batch_size=4, min_valid_per_session=2, quota_pc=2, quota_mobile=2, short_batches="tail"
    )


def test_a_draft_preview_prepares_round_one_once_and_publishing_uses_it(crowded):
    round_1 = study_preview_round(study_id=crowded.pk)
    assert (round_1.number, round_1.state, round_1.targets.count()) == (1, "open", 15)
    assert Study.objects.get(pk=crowded.pk).state == Study.State.DRAFT
    assert study_preview_round(study_id=crowded.pk).pk == round_1.pk  # a second preview makes nothing new
    with pytest.raises(SessionStartRefused, match="not open"):  # a draft's prepared round takes no sessions
        session_start(study=crowded, worker=make_worker(), device="pc")
    study_publish(study_id=crowded.pk)
    assert list(Round.objects.filter(study=crowded).values_list("pk", flat=True)) == [round_1.pk]
    assert Target.objects.filter(round__study=crowded).count() == 15


def test_a_dataset_without_objects_cannot_be_previewed(media):
    from collector.models import Instance

    study = make_study(make_dataset(media, n_images=1))
    Instance.objects.filter(image__dataset=study.dataset).delete()
    with pytest.raises(StudyStateError, match="has no instances"):
        study_preview_round(study_id=study.pk)


def test_the_preview_batch_is_the_allocations_choice_without_repeated_images(crowded):
    round_1 = study_preview_round(study_id=crowded.pk)
    targets = preview_targets(round=round_1, device="pc", seed=0)
    images = [target.instance.image_id for target in targets]
    assert len(targets) == 4 and len(set(images)) == 4  # never the same image twice
    assert {t.pk for t in targets} == set(target_candidates(round=round_1, device="pc", count=4))
    # another batch number shuffles differently (some seed among a few does), the same one repeats
    orders = {
        tuple(t.pk for t in preview_targets(round=round_1, device="pc", seed=seed)) for seed in range(6)
    }
    assert len(orders) > 1
    assert [t.pk for t in preview_targets(round=round_1, device="pc", seed=3)] == [
        t.pk for t in preview_targets(round=round_1, device="pc", seed=3)
    ]


def test_the_preview_follows_quota_deficits_like_a_new_worker(crowded):
    study_publish(study_id=crowded.pk)
    study = Study.objects.get(pk=crowded.pk)
    round_1 = study.rounds.get()
    # targets with their pc quota full are not offered any more; the preview moves on to the others
    full = list(round_1.targets.order_by("id")[:9].values_list("pk", flat=True))
    Target.objects.filter(pk__in=full).update(valid_pc=2)
    offered = {t.pk for t in preview_targets(round=round_1, device="pc")}
    assert offered and not offered & set(full)
    # mobile still offers everything; a worker who starts now gets exactly what the preview showed (a batch of
    # 2 images: the study allows tail batches that can still meet its rule of 2)
    session = session_start(study=study, worker=make_worker(), device="pc")
    assert set(session.trials.values_list("target_id", flat=True)) == offered and len(offered) == 2
    # with full batches only a new worker gets nothing, and the preview shows the stimuli (one per image), not
    # a batch anyone would get
    Study.objects.filter(pk=study.pk).update(short_batches="full_only")
    with pytest.raises(SessionStartRefused):
        session_start(study=Study.objects.get(pk=study.pk), worker=make_worker(), device="pc")
    shown = preview_targets(round=Round.objects.select_related("study").get(pk=round_1.pk), device="pc")
    assert len({t.instance.image_id for t in shown}) == len(shown) == 4


def test_click_check_applies_the_validation_rule(media):
    # 400 × 300 images: diagonal 500 px, radius 1 % = 5 px; the object is the rectangle x 150-249, y 100-199
    study = make_study(make_rect_dataset(media, n_images=2), batch_size=2, min_valid_per_session=1)
    target = study_preview_round(study_id=study.pk).targets.first()
    inside = preview_click_check(target=target, x=200.5, y=150.5)
    assert inside == {
        "valid": True, "distance_px": 0.0, "radius_px": 5.0, "reason": "", "message": "Counts: inside the object.",
    }  # fmt: skip
    near = preview_click_check(target=target, x=254.5, y=150.5)  # pixel 254: 5 px from column 249
    assert (near["valid"], near["distance_px"]) == (True, 5.0)
    far = preview_click_check(target=target, x=255.5, y=150.5)
    assert (far["valid"], far["distance_px"], far["reason"]) == (False, 6.0, "outside_region")
    assert "farther than the 5.0 px radius" in far["message"]
    outside = preview_click_check(target=target, x=-1.0, y=10.0)
    assert (outside["valid"], outside["reason"]) == (False, "outside_image")


def test_go_live_and_halt_for_a_standalone_link_study(crowded):
    assert "Published" in study_go_live(study_id=crowded.pk)
    assert Study.objects.get(pk=crowded.pk).state == Study.State.PUBLISHED
    make_validated_batch(Study.objects.get(pk=crowded.pk), device="pc")
    assert "Paused" in study_halt(study_id=crowded.pk, close=False)
    assert Study.objects.get(pk=crowded.pk).state == Study.State.PAUSED
    study_go_live(study_id=crowded.pk)
    assert "Closed" in study_halt(study_id=crowded.pk, close=True)
    with pytest.raises(StudyStateError, match="closed"):
        study_go_live(study_id=crowded.pk)
