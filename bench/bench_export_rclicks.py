"""Benchmark: the RClicks export of 475,544 clicks (the published RClicks set's size) from PostgreSQL.

Generates the rows into its own database ``clicklab_bench_export`` (created and dropped by this script;
COPY for sessions, trials and clicks), then times, each in a fresh subprocess so peak RSS is its own:

* ours: ``exports.rclicks.rclicks_export`` (streaming csv writer + 8,144 previous-round masks), on the
  full study and on a study with 1/4 of the clicks but the same targets (memory must not grow);
* baseline: the same rows fetched with one joined ``values_list`` into a pandas DataFrame, floor/clip
  vectorised, then ``DataFrame.to_csv`` (no masks);
* idle: a process that only sets Django up and imports what the others import (RSS floor).

Prints wall time and peak RSS (ru_maxrss) of each, RSS above the idle floor, and the ratios ours /
baseline. Goal: ours <= 10 s for 475,544 rows and the same peak at N and N/4.

Usage: ``.venv/bin/python bench/bench_export_rclicks.py [--rows 475544] [--keep-db]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "clicklab_bench_export"
PG_URL = os.environ.get("CLICKLAB_BENCH_PG", "postgres://postgres@127.0.0.1:5432")
# Published RClicks scale (protocol §1.1): first-round and later-round clicks, previous masks.
FIRST_CLICKS, LATER_CLICKS, PREV_MASKS = 185_349, 290_195, 8_144
IMAGES, INSTANCES = 2_000, 2_531
WIDTH, HEIGHT = 480, 360


def _django(env_dir: Path) -> None:
    os.environ["DATABASE_URL"] = f"{PG_URL}/{DB_NAME}"
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    os.environ["CLICKLAB_VAR_DIR"] = str(env_dir)
    os.environ["CLICKLAB_MEDIA_ROOT"] = str(env_dir / "media")
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["LOG_LEVEL"] = "WARNING"
    sys.path.insert(0, str(PROJECT_ROOT))
    import django

    django.setup()


# --------------------------------------------------------------------------------------------------
# database and rows


def _admin_connection():
    import psycopg

    return psycopg.connect(f"{PG_URL}/postgres", autocommit=True)


def create_database() -> None:
    with _admin_connection() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")


def drop_database() -> None:
    with _admin_connection() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def _copy(model, rows) -> int:
    """COPY ``rows`` (dicts by attname; missing fields take the model default) into ``model``'s table."""
    from django.db import connection

    iterator = iter(rows)
    first = next(iterator, None)
    if first is None:
        return 0
    # The primary key is left to its identity default unless the rows carry it.
    fields = [f for f in model._meta.concrete_fields if not (f.primary_key and f.attname not in first)]
    rows = itertools.chain([first], iterator)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    count = 0
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {model._meta.db_table} ({columns}) FROM STDIN") as copy,
    ):
        for values in rows:
            row = []
            for f in fields:
                value = values[f.attname] if f.attname in values else f.get_default()
                if isinstance(value, dict | list):
                    value = json.dumps(value)
                row.append(value)
            copy.write_row(row)
            count += 1
    return count


def _mask_png(rng: random.Random) -> bytes:
    import io

    import numpy as np
    from PIL import Image

    mask = np.zeros((HEIGHT, WIDTH), dtype=np.uint8)
    x0, y0 = rng.randrange(0, WIDTH // 2), rng.randrange(0, HEIGHT // 2)
    mask[y0 : y0 + rng.randrange(20, HEIGHT // 2), x0 : x0 + rng.randrange(20, WIDTH // 2)] = 255
    buffer = io.BytesIO()
    Image.fromarray(mask, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def generate(*, rows: int, media_root: Path) -> dict[str, int]:
    """Rows for two studies on one dataset: 'full' with ``rows`` clicks, 'quarter' with rows // 4.

    Both have the same 2,531 first-round and 8,144 second-round targets (sharing the mask files), so
    the only difference between their exports is the click count."""
    from django.apps import apps
    from django.conf import settings
    from django.core.management import call_command
    from django.db import transaction

    from collector.models import Click, Dataset, Image, Instance, Round, Session, Study, Target, Trial, Worker

    # Tables straight from the models (as pytest --nomigrations does), so model fields added since the
    # last migration file are there too.
    settings.MIGRATION_MODULES = {config.label: None for config in apps.get_app_configs()}
    call_command("migrate", run_syncdb=True, verbosity=0)
    rng = random.Random(7)
    now = datetime.now(tz=UTC)
    first_share = FIRST_CLICKS / (FIRST_CLICKS + LATER_CLICKS)
    with transaction.atomic():
        dataset = Dataset.objects.create(name="BenchSet", layout="folder", source_path="/nonexistent")
        two_objects = INSTANCES - IMAGES
        images = Image.objects.bulk_create(
            Image(dataset=dataset, stem=f"img {i:04d}.v1", file=f"x/{i}.jpg", file_size=1, sha256="0" * 64,
                  width=WIDTH, height=HEIGHT, original_width=WIDTH, original_height=HEIGHT)
            for i in range(IMAGES)
        )  # fmt: skip
        instances = Instance.objects.bulk_create(
            Instance(image=image, object_stem=str(k) if i < two_objects else "", object_id=max(k, 1),
                     mask_file="m.png", mask_sha256="0", source_mask_file="m.png", source_mask_size=1,
                     source_mask_sha256="0", area=100, bbox_x0=0, bbox_y0=0, bbox_x1=9, bbox_y1=9)
            for i, image in enumerate(images)
            for k in ((1, 2) if i < two_objects else (0,))
        )  # fmt: skip
        mask_dir = media_root / "bench_masks"
        mask_dir.mkdir(parents=True, exist_ok=True)
        mask_names = []
        for index in range(PREV_MASKS):
            (mask_dir / f"{index}.png").write_bytes(_mask_png(rng))
            mask_names.append(f"bench_masks/{index}.png")
        workers = Worker.objects.bulk_create(
            Worker(platform="link", external_id=f"w{i}", pseudonym=f"p{i:08d}") for i in range(3000)
        )
        studies = {}
        for label, n_clicks in (("full", rows), ("quarter", rows // 4)):
            study = Study.objects.create(name=f"bench {label}", dataset=dataset, state="closed")
            round_1 = Round.objects.create(study=study, number=1)
            round_2 = Round.objects.create(study=study, number=2)
            first_targets = Target.objects.bulk_create(
                Target(round=round_1, instance=inst, full_stem=inst.first_round_full_stem)
                for inst in instances
            )
            later_targets = []
            for index in range(PREV_MASKS):
                inst = instances[index % len(instances)]
                click_type = "fn" if index % 3 else "fp"
                device = "pc" if index % 2 else "mobile"
                k = index // len(instances)
                later_targets.append(
                    Target(round=round_2, instance=inst, click_type=click_type, model_type="sam",
                           full_stem=f"{inst.first_round_full_stem}_sam_{click_type}_{device}_{k}",
                           source_device=device, source_index=k, previous_mask_file=mask_names[index])
                )  # fmt: skip
            later_targets = Target.objects.bulk_create(later_targets)
            n_first = round(n_clicks * first_share)
            plan = [(round_1, first_targets, n_first), (round_2, later_targets, n_clicks - n_first)]
            session_base = (Session.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
            trial_base = (Trial.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1

            def slots(plan=plan, session_base=session_base, trial_base=trial_base):
                """(session id, round, device, worker, trial id, position, target id), streamed."""
                session_id, trial_id = session_base, trial_base
                for round_, targets, count in plan:
                    for start in range(0, count, 10):
                        device = "pc" if (start // 10) % 2 else "mobile"
                        worker = workers[(start // 10) % len(workers)].pk
                        for position in range(min(10, count - start)):
                            target = targets[(start + position) % len(targets)].pk
                            yield session_id, round_.pk, device, worker, trial_id, position, target
                            trial_id += 1
                        session_id += 1

            _copy(
                Session,
                (
                    {"id": sid, "study_id": study.pk, "round_id": round_id, "worker_id": worker, "device": device,
                     "status": "finished", "validity": "counted", "valid_clicks": 10,
                     "client_info": {"viewport_width": 1280, "devicePixelRatio": 2}, "started_at": now,
                     "finished_at": now, "expires_at": now + timedelta(hours=1), "completion_code": "c"}
                    for sid, round_id, device, worker, _, position, _ in slots()
                    if position == 0
                ),
            )  # fmt: skip
            _copy(
                Trial,
                (
                    {"id": tid, "session_id": sid, "target_id": target, "position": position,
                     "phase_onsets_ms": {"A": 0.0, "D": 5100.0}, "refresh_hz": 60.0}
                    for sid, _, _, _, tid, position, target in slots()
                ),
            )  # fmt: skip
            _copy(
                Click,
                (
                    {"trial_id": tid, "idempotency_key": f"{label}-{tid}", "x": rng.uniform(-0.5, WIDTH),
                     "y": rng.uniform(0, HEIGHT + 0.5), "shown_width": 960.0, "shown_height": 720.0,
                     "pointer_type": "mouse", "reaction_ms": 400.0, "received_at": now, "is_valid": True,
                     "distance_px": 0.0}
                    for _, _, _, _, tid, _, _ in slots()
                ),
            )  # fmt: skip
            studies[label] = study.pk
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return studies


# --------------------------------------------------------------------------------------------------
# children (one measurement per process)


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child(mode: str, study_id: int, out: Path) -> dict:
    import pandas  # noqa: F401  (every child imports the same libraries, so the idle floor is comparable)

    from exports.rclicks import rclicks_export

    started = time.perf_counter()
    if mode == "idle":
        return {"seconds": 0.0, "peak_rss_mb": _peak_rss_mb()}
    if mode == "ours":
        result = rclicks_export(study_ids=[study_id], out_dir=out)
        return {
            "seconds": time.perf_counter() - started,
            "csv_seconds": result.csv_seconds,
            "masks_seconds": result.masks_seconds,
            "rows": result.rows,
            "masks": result.masks,
            "peak_rss_mb": _peak_rss_mb(),
        }
    return baseline(study_id, out, started)


def baseline(study_id: int, out: Path, started: float) -> dict:
    """The same rows as a DataFrame (one joined query, fully materialised), then to_csv."""
    import numpy as np
    import pandas as pd

    from collector.models import Click

    fields = {
        "dataset": "trial__target__instance__image__dataset__name",
        "image_stem": "trial__target__instance__image__stem",
        "object_stem": "trial__target__instance__object_stem",
        "model_type": "trial__target__model_type",
        "click_type": "trial__target__click_type",
        "full_stem": "trial__target__full_stem",
        "device": "trial__session__device",
        "x": "x",
        "y": "y",
        "w": "trial__target__instance__image__width",
        "h": "trial__target__instance__image__height",
    }
    query = (
        Click.objects.filter(
            trial__session__study_id=study_id, trial__session__validity="counted", is_valid=True
        )
        .order_by("trial__target_id", "id")
        .values_list(*fields.values())
    )
    frame = pd.DataFrame.from_records(list(query), columns=list(fields))
    frame["x"] = np.clip(np.floor(frame["x"]), 0, frame["w"] - 1).astype(np.int64)
    frame["y"] = np.clip(np.floor(frame["y"]), 0, frame["h"] - 1).astype(np.int64)
    csv_started = time.perf_counter()
    frame.to_csv(out / "clicks.csv", index=False)
    return {
        "seconds": time.perf_counter() - started,
        "to_csv_seconds": time.perf_counter() - csv_started,
        "rows": len(frame),
        "peak_rss_mb": _peak_rss_mb(),
    }


def run_child(mode: str, study_id: int, env_dir: Path, out_base: Path | None = None) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"bench-{mode}-", dir=out_base or env_dir))
    command = [sys.executable, __file__, "--child", mode, "--study", str(study_id), "--out", str(out),
               "--env-dir", str(env_dir)]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"child {mode} failed:\n{completed.stderr[-3000:]}")
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["csv_bytes"] = (out / "clicks.csv").stat().st_size if (out / "clicks.csv").exists() else 0
    shutil.rmtree(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=FIRST_CLICKS + LATER_CLICKS)
    parser.add_argument("--keep-db", action="store_true", help="Leave the database for inspection.")
    parser.add_argument("--child", choices=("ours", "baseline", "idle"), help=argparse.SUPPRESS)
    parser.add_argument("--study", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--env-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        _django(args.env_dir)
        print(json.dumps(child(args.child, args.study, args.out)))
        return

    with tempfile.TemporaryDirectory(prefix="clicklab-bench-export-") as tmp:
        env_dir = Path(tmp)
        create_database()
        try:
            _django(env_dir)
            started = time.perf_counter()
            studies = generate(rows=args.rows, media_root=env_dir / "media")
            print(
                f"generated {args.rows:,} + {args.rows // 4:,} clicks in {time.perf_counter() - started:.1f} s"
            )
            idle = run_child("idle", studies["full"], env_dir)
            ours = run_child("ours", studies["full"], env_dir)
            ours_quarter = run_child("ours", studies["quarter"], env_dir)
            # The same export written to tmpfs: separates the file system's per-file cost (8,144 masks).
            shm = Path("/dev/shm")
            ours_tmpfs = run_child("ours", studies["full"], env_dir, shm) if shm.is_dir() else None
            base = run_child("baseline", studies["full"], env_dir)
            base_quarter = run_child("baseline", studies["quarter"], env_dir)
        finally:
            if not args.keep_db:
                from django.db import connections

                connections.close_all()
                drop_database()

    floor = idle["peak_rss_mb"]
    print(f"idle process (Django + pandas + exports imported): peak RSS {floor:.0f} MB")
    print(f"{'run':<28}{'rows':>9}{'time s':>9}{'csv s':>8}{'masks s':>9}{'peak MB':>9}{'above idle':>12}")
    runs = [("ours N", ours), ("ours N/4", ours_quarter), ("pandas baseline N", base),
            ("pandas baseline N/4", base_quarter)]  # fmt: skip
    if ours_tmpfs is not None:
        runs.insert(2, ("ours N, output on tmpfs", ours_tmpfs))
    for name, r in runs:
        csv_s = r.get("csv_seconds", r["seconds"])
        masks = f"{r['masks_seconds']:.2f}" if "masks_seconds" in r else "-"
        above = r["peak_rss_mb"] - floor
        print(
            f"{name:<28}{r['rows']:>9,}{r['seconds']:>9.2f}{csv_s:>8.2f}{masks:>9}{r['peak_rss_mb']:>9.0f}{above:>12.0f}"
        )
    print(
        f"ours masks written: {ours['masks']:,}; csv bytes ours {ours['csv_bytes']:,} vs baseline {base['csv_bytes']:,}"
    )
    print(f"time ratio ours/baseline (total, ours incl. masks): {ours['seconds'] / base['seconds']:.2f}")
    print(f"time ratio ours/baseline (csv only):               {ours['csv_seconds'] / base['seconds']:.2f}")
    print(
        "memory above idle, ours/baseline:                  "
        f"{(ours['peak_rss_mb'] - floor) / max(base['peak_rss_mb'] - floor, 1e-9):.3f}"
    )
    print(
        f"memory growth N/4 -> N above idle: ours {ours_quarter['peak_rss_mb'] - floor:.0f} -> "
        f"{ours['peak_rss_mb'] - floor:.0f} MB; baseline {base_quarter['peak_rss_mb'] - floor:.0f} -> "
        f"{base['peak_rss_mb'] - floor:.0f} MB"
    )
    if ours_tmpfs is not None:
        print(
            f"time ratio ours on tmpfs/baseline (total):          {ours_tmpfs['seconds'] / base['seconds']:.2f}"
        )
    goal = "met" if ours["seconds"] <= 10.0 else "NOT met"
    print(f"goal <= 10 s for {ours['rows']:,} rows: {goal} ({ours['seconds']:.2f} s)")


if __name__ == "__main__":
    main()
