"""Allocation: unseen images, quota preference, quota + in-flight never exceeded (also under 50 concurrent
starts, each thread on its own database connection)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection, transaction
from django.utils import timezone

from collector.models import Round, Session, Target, Trial
from collector.services.allocation import (
    AllocationError,
    allocate_targets,
    inflight_release,
    sessions_expire,
    target_candidates,
)
from collector.services.session_finish import SessionFinishRefused, session_finish
from collector.services.session_start import SessionStartRefused, session_start
from tests.factories import make_dataset, make_study, make_worker

pytestmark = pytest.mark.django_db


def _open_round(study) -> Round:
    return study.rounds.get(number=1)


def _start(*, study, worker, device="pc", count=None) -> tuple[Session | None, list[Target]]:
    """What session_start does around allocation: one transaction, session + trials."""
    round_ = _open_round(study)
    with transaction.atomic():
        targets = allocate_targets(
            round=round_, worker=worker, device=device, count=count or study.batch_size
        )
        if not targets:
            return None, []
        session = Session.objects.create(
            study=study,
            round=round_,
            worker=worker,
            device=device,
            expires_at=timezone.now() + timezone.timedelta(seconds=study.session_timeout_s),
        )
        Trial.objects.bulk_create(
            [Trial(session=session, target=t, position=i) for i, t in enumerate(targets)]
        )
    return session, targets


def test_batch_has_distinct_unseen_images_and_counts_inflight(tmp_path):
    dataset = make_dataset(tmp_path, n_images=6, objects_per_image=2)
    # tail: a shorter batch is offered when it can still meet the batch rule (2 valid clicks here)
    study = make_study(dataset, publish=True, batch_size=4, short_batches="tail", min_valid_per_session=2)
    worker = make_worker()

    _, first = _start(study=study, worker=worker, device="mobile")
    images_first = [t.instance.image_id for t in first]
    assert len(first) == 4 and len(set(images_first)) == 4

    _, second = _start(study=study, worker=worker, device="mobile")
    images_second = {t.instance.image_id for t in second}
    # 6 images, 4 seen: only the 2 unseen ones are left for this worker.
    assert len(second) == 2
    assert images_second.isdisjoint(images_first)

    _, third = _start(study=study, worker=worker, device="mobile")
    assert third == []

    inflight = dict(Target.objects.values_list("pk", "inflight_mobile"))
    assert sum(inflight.values()) == 6
    assert all(v == 1 for pk, v in inflight.items() if pk in {t.pk for t in first + second})
    assert Target.objects.filter(inflight_pc__gt=0).count() == 0


def test_prefers_targets_furthest_from_quota(tmp_path):
    dataset = make_dataset(tmp_path, n_images=5)
    study = make_study(
        dataset, publish=True, batch_size=2, quota_pc=10, short_batches="tail", min_valid_per_session=1
    )
    targets = list(_open_round(study).targets.order_by("pk"))
    # deficits: 10-8=2, 10-1-1=8, 10-0=10, 10-5=5, 10-9-1=0 (full)
    for target, (valid, inflight) in zip(targets, [(8, 0), (1, 1), (0, 0), (5, 0), (9, 1)], strict=True):
        Target.objects.filter(pk=target.pk).update(valid_pc=valid, inflight_pc=inflight)

    _, got = _start(study=study, worker=make_worker())
    assert {t.pk for t in got} == {targets[2].pk, targets[1].pk}

    _, got = _start(study=study, worker=make_worker(), count=5)
    # the full target (deficit 0) is never handed out
    assert targets[4].pk not in {t.pk for t in got}
    assert len(got) == 4


def test_short_batches_follow_the_policy_without_changing_counters_when_refused(tmp_path):
    """full_only never offers a short batch; tail offers one of at least max(min_batch_size,
    min_valid_per_session) trials, so it can still meet the batch rule; pad (the default) allocates what is
    wanted (the batch is filled up after, tests/collector/test_services_screens.py)."""
    dataset = make_dataset(tmp_path, n_images=3)
    study = make_study(dataset, publish=True, batch_size=10, min_valid_per_session=1)
    assert study.short_batches == "pad"
    _, got = _start(study=study, worker=make_worker())
    assert len(got) == 3
    Target.objects.update(inflight_pc=0)

    study.short_batches = "full_only"
    study.save()
    session, got = _start(study=study, worker=make_worker())
    assert session is None and got == []
    assert Target.objects.filter(inflight_pc__gt=0).count() == 0

    study.short_batches, study.min_batch_size = "tail", 4
    study.save()
    session, got = _start(study=study, worker=make_worker())
    assert session is None and got == []
    assert Target.objects.filter(inflight_pc__gt=0).count() == 0

    study.min_batch_size, study.min_valid_per_session = 1, 4  # 3 trials could never meet 4 valid clicks
    study.save()
    session, got = _start(study=study, worker=make_worker())
    assert session is None and got == []

    study.min_batch_size, study.min_valid_per_session = 3, 3
    study.save()
    _, got = _start(study=study, worker=make_worker())
    assert len(got) == 3


def test_rejects_bad_requests(tmp_path):
    dataset = make_dataset(tmp_path, n_images=2)
    study = make_study(dataset, publish=True)
    round_ = _open_round(study)
    worker = make_worker()
    with pytest.raises(AllocationError, match="device 'tablet'"), transaction.atomic():
        allocate_targets(round=round_, worker=worker, device="tablet", count=10)
    Round.objects.filter(pk=round_.pk).update(state=Round.State.CLOSED)
    round_.refresh_from_db()
    with pytest.raises(AllocationError, match="closed, not open"), transaction.atomic():
        allocate_targets(round=round_, worker=worker, device="pc", count=10)


def test_inflight_release_never_goes_below_zero(tmp_path):
    dataset = make_dataset(tmp_path, n_images=2)
    study = make_study(dataset, publish=True)
    a, b = _open_round(study).targets.order_by("pk")
    Target.objects.filter(pk=a.pk).update(inflight_mobile=3)
    Target.objects.filter(pk=b.pk).update(inflight_mobile=1)
    with transaction.atomic():
        inflight_release(target_ids=[a.pk, a.pk, b.pk, b.pk], device="mobile")
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.inflight_mobile, b.inflight_mobile) == (1, 0)


@pytest.mark.django_db(transaction=True)
def test_refuses_to_run_outside_a_transaction(tmp_path):
    study = make_study(make_dataset(tmp_path, n_images=2), publish=True)
    with pytest.raises(AllocationError, match="inside transaction.atomic"):
        allocate_targets(round=_open_round(study), worker=make_worker(), device="pc", count=10)
    assert Target.objects.filter(inflight_pc__gt=0).count() == 0


@pytest.mark.django_db(transaction=True)
def test_50_concurrent_starts_never_exceed_quota_plus_inflight(tmp_path):
    """50 threads, each on its own connection, call session_start at once for 12 images x quota 3."""
    n_images, quota, batch = 12, 3, 10
    dataset = make_dataset(tmp_path, n_images=n_images)
    study = make_study(
        dataset, publish=True, quota_pc=quota, batch_size=batch, short_batches="tail", min_valid_per_session=1
    )
    workers = [make_worker() for _ in range(50)]
    barrier = threading.Barrier(len(workers))
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def start(worker):
        try:
            barrier.wait(timeout=60)
            try:
                session = session_start(study=study, worker=worker, device="pc")
            except SessionStartRefused:
                results[worker.pk] = []
            else:
                results[worker.pk] = list(session.trials.values_list("target_id", flat=True))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert len(results) == 50

    handed_out = Counter(pk for pks in results.values() for pk in pks)
    targets = {t.pk: t for t in Target.objects.filter(round__study=study)}
    for pk, target in targets.items():
        assert target.valid_pc + target.inflight_pc <= quota, target
        assert target.inflight_pc == handed_out[pk], (target, handed_out[pk])
    for pks in results.values():
        images = [targets[pk].instance.image_id for pk in pks]
        assert len(images) == len(set(images))
    assert sum(handed_out.values()) > 0
    # Trials in the database agree with the counters (no allocation without its session, or vice versa).
    assert Trial.objects.filter(session__study=study).count() == sum(handed_out.values())

    # Whatever skip-locked left over is taken by later starts, up to exactly the quota and no further.
    for _ in range(n_images * quota):
        _start(study=study, worker=make_worker())
    totals = Target.objects.filter(round__study=study).values_list("inflight_pc", flat=True)
    assert list(totals) == [quota] * n_images


def test_expiry_releases_running_sessions_past_their_deadline_once(tmp_path):
    dataset = make_dataset(tmp_path, n_images=4)
    study = make_study(dataset, publish=True, batch_size=2, quota_mobile=5)
    late, _ = _start(study=study, worker=make_worker(), device="mobile")
    on_time, _ = _start(study=study, worker=make_worker(), device="mobile")
    finished, _ = _start(study=study, worker=make_worker(), device="mobile")
    Session.objects.filter(pk=finished.pk).update(status=Session.Status.FINISHED)
    past = timezone.now() - timezone.timedelta(seconds=1)
    Session.objects.filter(pk__in=[late.pk, finished.pk]).update(expires_at=past)
    before = dict(Target.objects.values_list("pk", "inflight_mobile"))

    assert sessions_expire() == 1
    assert sessions_expire() == 0
    statuses = dict(Session.objects.values_list("pk", "status"))
    assert statuses == {late.pk: "expired", on_time.pk: "started", finished.pk: "finished"}
    after = dict(Target.objects.values_list("pk", "inflight_mobile"))
    released = {pk: before[pk] - after[pk] for pk in before}
    late_targets = set(late.trials.values_list("target_id", flat=True))
    assert released == {pk: (1 if pk in late_targets else 0) for pk in before}


def test_expired_session_cannot_be_finished_and_its_targets_go_to_others(tmp_path):
    dataset = make_dataset(tmp_path, n_images=2)
    study = make_study(dataset, publish=True, batch_size=2, quota_pc=1)
    abandoned = session_start(study=study, worker=make_worker(), device="pc")
    with pytest.raises(SessionStartRefused):
        session_start(study=study, worker=make_worker(), device="pc")  # both targets in flight
    Session.objects.filter(pk=abandoned.pk).update(expires_at=timezone.now() - timezone.timedelta(seconds=1))
    sessions_expire()
    assert len(session_start(study=study, worker=make_worker(), device="pc").trials.all()) == 2
    with pytest.raises(SessionFinishRefused):
        session_finish(session_id=abandoned.pk)


@pytest.mark.django_db(transaction=True)
def test_concurrent_starts_are_not_refused_while_targets_remain(tmp_path):
    """Rows locked by one start are skipped by the others; a start that finds only locked rows must look
    again rather than tell the worker nothing is left (12 images, plenty of quota, 8 starts at once)."""
    study = make_study(make_dataset(tmp_path, n_images=12), publish=True, batch_size=10, quota_pc=100)
    workers = [make_worker() for _ in range(8)]
    barrier = threading.Barrier(len(workers))
    sizes: list[int] = []
    errors: list[BaseException] = []

    def start(worker):
        try:
            barrier.wait(timeout=60)
            sizes.append(session_start(study=study, worker=worker, device="pc").trials.count())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sizes == [10] * 8
    assert sum(Target.objects.filter(round__study=study).values_list("inflight_pc", flat=True)) == 80


def test_a_round_closed_while_a_start_waited_gives_no_targets(tmp_path):
    """A start reads the open round, then waits its turn on the round's row; the validation it waited for
    may have closed the round. It then takes nothing, and the worker hears that the round is complete."""
    study = make_study(make_dataset(tmp_path, n_images=5), publish=True, batch_size=5)
    seen_open = _open_round(study)
    Round.objects.filter(pk=seen_open.pk).update(state=Round.State.CLOSED)
    with transaction.atomic():
        assert allocate_targets(round=seen_open, worker=make_worker(), device="pc", count=5) == []
    assert Target.objects.filter(inflight_pc__gt=0).count() == 0


def test_every_start_takes_exactly_the_targets_the_candidates_rule_names(tmp_path):
    """The rule, not its implementation: on random counters (ties, full targets, several objects per image)
    and workers who saw some images, each start takes exactly ``target_candidates``'s choice for that worker,
    one slot each, and a start that finds fewer than ``min_batch_size`` changes nothing. PostgreSQL runs its
    one-statement allocation here, SQLite the ORM queries, against the same reading of the rule."""
    import random

    rng = random.Random(7)
    dataset = make_dataset(tmp_path, n_images=9, objects_per_image=3, size=(48, 36))
    study = make_study(
        dataset,
        publish=True,
        batch_size=4,
        min_batch_size=3,
        quota_pc=6,
        short_batches="tail",
        min_valid_per_session=1,
    )
    round_ = _open_round(study)
    target_ids = list(round_.targets.order_by("pk").values_list("pk", flat=True))
    workers = [make_worker() for _ in range(4)]
    taken_runs = refused_runs = 0
    for run in range(40):
        for pk in target_ids:  # deficits 6 - valid - inflight in 0..6, many equal
            Target.objects.filter(pk=pk).update(valid_pc=rng.randint(0, 4), inflight_pc=rng.randint(0, 2))
        if run % 3 == 0:  # a newcomer now and then, so some workers have seen nothing and some a lot
            workers[run % len(workers)] = make_worker()
        worker = workers[run % len(workers)]
        seen = list(
            Trial.objects.filter(session__study=study, session__worker=worker).values_list(
                "target__instance__image_id", flat=True
            )
        )
        expected = target_candidates(round=round_, device="pc", count=study.batch_size, seen_images=seen)
        before = dict(Target.objects.values_list("pk", "inflight_pc"))
        session, got = _start(study=study, worker=worker)
        after = dict(Target.objects.values_list("pk", "inflight_pc"))
        if len(expected) < study.min_batch_size:
            assert got == [] and session is None and after == before, (run, expected)
            refused_runs += 1
            continue
        assert sorted(t.pk for t in got) == sorted(expected), (run, expected)
        assert {pk: after[pk] - before[pk] for pk in after if after[pk] != before[pk]} == dict.fromkeys(
            expected, 1
        )
        assert all(t.inflight_pc == after[t.pk] for t in got)  # the objects carry the new counters
        taken_runs += 1
    assert taken_runs >= 10 and refused_runs >= 3, (taken_runs, refused_runs)  # both branches were exercised


def test_a_started_session_has_one_trial_per_target_taken_at_positions_0_to_n_with_model_defaults(tmp_path):
    """session_start creates the trials with the allocation (on PostgreSQL in its one statement): positions
    0..n-1, each target taken once, every other field at its model default, in a shuffled order."""
    study = make_study(make_dataset(tmp_path, n_images=12, size=(48, 36)), publish=True, batch_size=8)
    defaults = Trial()
    fields = [
        f.attname
        for f in Trial._meta.concrete_fields
        if f.attname not in ("id", "session_id", "target_id", "position")
    ]
    orders = set()
    for _ in range(6):
        session = session_start(study=study, worker=make_worker(), device="pc")
        trials = list(session.trials.order_by("position"))
        assert [t.position for t in trials] == list(range(8))
        taken = Target.objects.filter(inflight_pc__gt=0)
        assert len({t.target_id for t in trials}) == 8
        assert all(getattr(t, name) == getattr(defaults, name) for t in trials for name in fields), fields
        orders.add(tuple(t.target_id for t in trials))
        Target.objects.filter(pk__in=[t.target_id for t in trials]).update(
            inflight_pc=0
        )  # the next gets them too
    assert taken.count() == 0
    assert len(orders) > 1  # the order is drawn, not the id order every time
