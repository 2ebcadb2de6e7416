"""Session starts per second and validations per second, with the database and the broker in use.

Each figure is printed with its ratio against a baseline measured in the same run:

* starts: ``session_start`` (worker and round row locks, targets locked in id order) vs a naive allocation that reads the round's targets
  into Python, sorts them and saves each chosen row (no locks: it can over-allocate, and we count how
  often it did);
* validations: ``session_validate`` (one transaction, windowed distance, bulk writes) vs a per-click ORM
  validation that runs a whole-image distance transform per click and saves every row on its own;
* end to end: validations sent through the broker to a real Celery worker process, vs the in-process rate.

Runs against a throw-away database created like pytest-django's (``bench_<name>`` of DATABASE_URL, or
``bench_allocation.sqlite3`` under CLICKLAB_VAR_DIR), dropped at the end. Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/clicklab_e CELERY_BROKER_URL=redis://127.0.0.1:6379/2 \\
        .venv/bin/python bench/bench_allocation_throughput.py [--sessions 60] [--threads 4]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from config.celery import app as celery_app

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402
from PIL import Image as PILImage  # noqa: E402
from scipy.ndimage import distance_transform_edt  # noqa: E402

from collector.models import Click, Session, Target, Trial  # noqa: E402
from collector.services.clicks import click_record  # noqa: E402
from collector.services.datasets import dataset_import  # noqa: E402
from collector.services.session_finish import session_finish  # noqa: E402
from collector.services.session_start import session_start  # noqa: E402
from collector.services.studies import study_create, study_publish  # noqa: E402
from collector.services.validation import session_validate  # noqa: E402
from collector.services.workers import worker_get_or_create  # noqa: E402
from tests.factories import draw_dataset_folder  # noqa: E402
from tests.support.celery_worker import CeleryWorkerProcess, purge_queues  # noqa: E402

_ids = iter(range(1, 10**9))


def _worker():
    return worker_get_or_create(platform="link", external_id=f"bench-{next(_ids)}")


# --------------------------------------------------------------------------------------------------
# baselines


def naive_start(*, study, device: str = "pc"):
    """Baseline allocation: everything in Python, no row locks, one save per target."""
    round_ = study.rounds.get(number=1)
    worker = _worker()
    with transaction.atomic():
        seen = set(
            Trial.objects.filter(session__study=study, session__worker=worker).values_list(
                "target__instance__image_id", flat=True
            )
        )
        quota = study.quota_for(device)
        candidates = [
            t
            for t in Target.objects.filter(round=round_).select_related("instance")
            if t.instance.image_id not in seen and t.valid_for(device) + t.inflight_for(device) < quota
        ]
        candidates.sort(key=lambda t: (-(quota - t.valid_for(device) - t.inflight_for(device)), t.pk))
        chosen, images = [], set()
        for target in candidates:
            if target.instance.image_id not in images:
                chosen.append(target)
                images.add(target.instance.image_id)
            if len(chosen) == study.batch_size:
                break
        for target in chosen:
            setattr(target, f"inflight_{device}", target.inflight_for(device) + 1)
            target.save()
        session = Session.objects.create(
            study=study, round=round_, worker=worker, device=device, expires_at=timezone.now()
        )
        for position, target in enumerate(chosen):
            Trial.objects.create(session=session, target=target, position=position)
    return session


def naive_validate(*, session_id: int) -> None:
    """Baseline validation: per click a full-image distance transform and its own UPDATEs."""
    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        study = session.study
        valid = []
        for trial in Trial.objects.filter(session=session):
            click = Click.objects.get(trial=trial)
            instance = trial.target.instance
            with instance.mask_file.open("rb") as handle:
                region = np.asarray(PILImage.open(handle).convert("L")) > 127
            distance = float(distance_transform_edt(~region)[math.floor(click.y), math.floor(click.x)])
            click.distance_px = distance
            click.is_valid = distance <= study.radius_fraction * instance.image.diagonal_px
            click.invalid_reason = "" if click.is_valid else "outside_region"
            click.save()
            if click.is_valid:
                valid.append(trial.target)
        session.valid_clicks = len(valid)
        session.validity = "counted" if len(valid) >= study.min_valid_per_session else "rejected"
        session.validated_at = timezone.now()
        session.save()
        for trial in Trial.objects.filter(session=session):
            target = Target.objects.get(pk=trial.target_id)
            target.inflight_pc = max(0, target.inflight_pc - 1)
            if session.validity == "counted" and trial.target_id in {t.pk for t in valid}:
                target.valid_pc += 1
            target.save()


# --------------------------------------------------------------------------------------------------
# helpers


def _threads(n_threads: int, n_calls: int, call) -> float:
    """Run ``call()`` n_calls times over n_threads threads (own connections); returns seconds."""
    counter = iter(range(n_calls))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run():
        try:
            while True:
                with lock:
                    if next(counter, None) is None:
                        return
                call()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(n_threads)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def _clicked_sessions(study, n: int) -> list[int]:
    """n finished sessions clicked like a worker: 8 of 10 at the object's centre, 2 in a corner."""
    ids = []
    for _ in range(n):
        session = session_start(study=study, worker=_worker(), device="pc")
        for trial in session.trials.select_related("target__instance__image"):
            instance = trial.target.instance
            good = trial.position < 8
            click_record(
                session=session,
                position=trial.position,
                idempotency_key=f"bench-{session.pk}-{trial.position}",
                x=(instance.bbox_x0 + instance.bbox_x1) / 2 if good else 1.0,
                y=(instance.bbox_y0 + instance.bbox_y1) / 2 if good else 1.0,
                shown_width=float(instance.image.width),
                shown_height=float(instance.image.height),
                pointer_type="mouse",
                reaction_ms=500.0,
            )
        session_finish(session_id=session.pk)  # its validate message goes to the broker after commit
        ids.append(session.pk)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--size", type=int, nargs=2, default=(640, 480), metavar=("W", "H"))
    parser.add_argument("--starts", type=int, default=200, help="session starts per variant")
    parser.add_argument("--sessions", type=int, default=60, help="validations per variant")
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()

    setup_test_environment()
    test_settings = settings.DATABASES["default"].setdefault("TEST", {})
    test_settings["MIGRATE"] = False
    if connection.vendor == "sqlite":
        test_settings["NAME"] = str(Path(settings.VAR_DIR) / "bench_allocation.sqlite3")
    else:
        test_settings["NAME"] = f"bench_{connection.settings_dict['NAME']}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    print(
        f"database: {connection.vendor} {connection.settings_dict['NAME']}; broker: {celery_app.conf['broker_url'].split('://')[0]}"
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = draw_dataset_folder(Path(tmp) / "bench", n_images=args.images, size=tuple(args.size))
            dataset = dataset_import(path=folder, layout="folder", name="bench").dataset

        def study():
            made = study_create(
                name=f"bench-{next(_ids)}", dataset=dataset, quota_pc=10**6, quota_mobile=10**6
            )
            return study_publish(study_id=made.pk)

        purge_queues()
        # -- session starts
        ours_study, naive_study = study(), study()
        t_ours = _threads(
            args.threads, args.starts, lambda: session_start(study=ours_study, worker=_worker(), device="pc")
        )
        t_naive = _threads(args.threads, args.starts, lambda: naive_start(study=naive_study))
        rate_ours, rate_naive = args.starts / t_ours, args.starts / t_naive
        print(
            f"session starts/s  session_start: {rate_ours:8.1f}   naive unlocked baseline: {rate_naive:8.1f}   "
            f"ratio {rate_ours / rate_naive:.2f}x  ({args.threads} threads, {args.starts} starts each)"
        )

        # -- validations in process
        val_study = study()
        ours_ids = _clicked_sessions(val_study, args.sessions)
        naive_ids = _clicked_sessions(val_study, args.sessions)
        purge_queues()
        started = time.perf_counter()
        for session_id in ours_ids:
            session_validate(session_id=session_id)
        t_ours = time.perf_counter() - started
        started = time.perf_counter()
        for session_id in naive_ids:
            naive_validate(session_id=session_id)
        t_naive = time.perf_counter() - started
        v_ours, v_naive = args.sessions / t_ours, args.sessions / t_naive
        print(
            f"validations/s     session_validate: {v_ours:7.1f}   per-click ORM + full EDT baseline: {v_naive:7.1f}   "
            f"ratio {v_ours / v_naive:.2f}x  ({args.sessions} sessions of 10 clicks, {args.size[0]}x{args.size[1]} masks)"
        )

        # -- validations through the broker and a real worker process: the messages wait in the broker,
        #    then one worker process drains them
        e2e_study = study()
        purge_queues()
        e2e_ids = _clicked_sessions(e2e_study, args.sessions)  # each finish sends its task on commit
        worker = CeleryWorkerProcess(queues="default")
        worker.start()
        try:
            started = time.perf_counter()
            while Session.objects.filter(pk__in=e2e_ids, validated_at__isnull=True).exists():
                time.sleep(0.02)
            t_e2e = time.perf_counter() - started
        finally:
            worker.stop()
        v_e2e = args.sessions / t_e2e
        print(
            f"validations/s     broker + 1 worker process: {v_e2e:7.1f}   vs in-process {v_ours:7.1f}   "
            f"ratio {v_e2e / v_ours:.2f}x"
        )
    finally:
        purge_queues()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
