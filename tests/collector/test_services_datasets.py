"""Dataset import: files and rows, idempotence, atomicity, and a clear error for every bad input."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from PIL import Image as PILImage

from collector.models import Dataset, Image, Instance
from collector.services.datasets import ImportFailed, dataset_import
from tests.factories import draw_dataset_folder
from tests.support.celery_worker import PROJECT_ROOT, worker_environment

pytestmark = pytest.mark.django_db


@pytest.fixture
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_import_creates_rows_and_files_with_hashes(tmp_path, media_root):
    folder = draw_dataset_folder(tmp_path / "ds", n_images=2, objects_per_image=2, ignore_band=True)
    (folder / "descriptions.csv").write_text(
        "image_stem,object_stem,description\nimg00,1,the left red blob\n", encoding="utf-8"
    )
    result = dataset_import(path=folder, layout="folder", name="Blobs")
    assert result.created and result.images == 2 and result.instances == 4 and result.ignore_bands == 4
    image = Image.objects.get(dataset__name="Blobs", stem="img00")
    stored = media_root / image.file.name
    assert stored.read_bytes() == (folder / "images" / "img00.jpg").read_bytes()
    assert image.sha256 == hashlib.sha256(stored.read_bytes()).hexdigest()
    assert image.file_size == stored.stat().st_size
    assert (image.width, image.height) == (160, 120)
    instance = Instance.objects.get(image=image, object_stem="1")
    assert instance.text_description == "the left red blob"
    mask = np.array(PILImage.open(media_root / instance.mask_file.name))
    assert mask.dtype == np.uint8 and mask.shape == (120, 160) and set(np.unique(mask)) == {0, 255}
    assert instance.area == int((mask == 255).sum())
    ignore = np.array(PILImage.open(media_root / instance.ignore_file.name))
    assert instance.ignore_area == int((ignore == 255).sum()) > 0
    assert not ((ignore == 255) & (mask == 255)).any()
    ys, xs = np.nonzero(mask)
    assert (instance.bbox_x0, instance.bbox_y0, instance.bbox_x1, instance.bbox_y1) == (
        xs.min(),
        ys.min(),
        xs.max(),
        ys.max(),
    )
    assert instance.first_round_full_stem == "img00_______1"


def test_reimport_of_the_same_folder_changes_nothing(tmp_path, media_root):
    folder = draw_dataset_folder(tmp_path / "ds", n_images=3)
    dataset_import(path=folder, layout="folder", name="Same")
    before = {p: p.stat().st_mtime_ns for p in _files(media_root)}
    rows_before = (Dataset.objects.count(), Image.objects.count(), Instance.objects.count())
    again = dataset_import(path=folder, layout="folder", name="Same")
    assert again.unchanged and not again.created
    assert (Dataset.objects.count(), Image.objects.count(), Instance.objects.count()) == rows_before
    assert {p: p.stat().st_mtime_ns for p in _files(media_root)} == before


def test_different_content_under_an_existing_name_is_refused(tmp_path, media_root):
    folder = draw_dataset_folder(tmp_path / "ds", n_images=2)
    dataset_import(path=folder, layout="folder", name="Named")
    other = draw_dataset_folder(tmp_path / "other", n_images=2, seed=5)
    before = _files(media_root)
    with pytest.raises(ImportFailed, match="already exists with different content.*--name"):
        dataset_import(path=other, layout="folder", name="Named")
    assert _files(media_root) == before


def test_names_with_the_same_slug_keep_separate_files(tmp_path, media_root):
    folder = draw_dataset_folder(tmp_path / "ds", n_images=1)
    a = dataset_import(path=folder, layout="folder", name="Grab Cut").dataset
    b = dataset_import(path=folder, layout="folder", name="grab-cut").dataset
    path_a = media_root / a.images.get().file.name
    path_b = media_root / b.images.get().file.name
    assert path_a != path_b and path_a.exists() and path_b.exists()


def _bad_folder(tmp_path: Path, problem: str) -> tuple[Path, str]:
    """A 4-image folder dataset whose third image has ``problem``; returns (folder, expected message)."""
    folder = draw_dataset_folder(tmp_path / problem, n_images=4)
    bad_image = folder / "images" / "img02.jpg"
    bad_mask = folder / "masks" / "img02.png"
    if problem == "missing_mask":
        bad_mask.unlink()
        return folder, "img02.jpg: no mask for image stem 'img02'"
    if problem == "size_mismatch":
        PILImage.fromarray(np.zeros((50, 60), np.uint8)).save(bad_mask)
        return folder, "img02.png: mask is 60x50 but image img02.jpg is 160x120"
    if problem == "empty_mask":
        PILImage.fromarray(np.zeros((120, 160), np.uint8)).save(bad_mask)
        return folder, "img02.png: empty mask"
    if problem == "truncated_image":
        data = bad_image.read_bytes()
        bad_image.write_bytes(data[: len(data) // 3])
        return folder, "img02.jpg: unreadable or truncated image"
    if problem == "not_an_image":
        bad_image.write_bytes(b"GIF? no, just text")
        return folder, "img02.jpg: not a readable image"
    if problem == "non_image_file":
        (folder / "images" / "readme.txt").write_text("x")
        return folder, "readme.txt: not an image file"
    if problem == "unsafe_stem":
        bad_image.rename(folder / "images" / "img\x1b02.jpg")
        bad_mask.rename(folder / "masks" / "img\x1b02.png")
        return folder, "unsafe stem"
    raise AssertionError(problem)


@pytest.mark.parametrize(
    "problem",
    [
        "missing_mask",
        "size_mismatch",
        "empty_mask",
        "truncated_image",
        "not_an_image",
        "non_image_file",
        "unsafe_stem",
    ],
)
def test_bad_input_names_the_file_and_imports_nothing(tmp_path, media_root, problem):
    folder, expected = _bad_folder(tmp_path, problem)
    with pytest.raises(ImportFailed) as info:
        dataset_import(path=folder, layout="folder", name="Bad")
    assert expected in str(info.value)
    assert not Dataset.objects.exists() and not Image.objects.exists() and not Instance.objects.exists()
    assert _files(media_root) == []


def test_decompression_bomb_imports_nothing(tmp_path, media_root, monkeypatch):
    folder = draw_dataset_folder(tmp_path / "bomb", n_images=2, size=(200, 150))
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 10_000)  # Pillow's documented limit knob
    with pytest.raises(ImportFailed, match="img00.jpg: image too large to load safely"):
        dataset_import(path=folder, layout="folder", name="Bomb")
    assert not Dataset.objects.exists() and _files(media_root) == []


def test_tetris_mask_without_any_object(tmp_path, media_root):
    root = tmp_path / "tetris"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    PILImage.fromarray(np.full((10, 10, 3), 100, np.uint8)).save(root / "images" / "a.png")
    PILImage.fromarray(np.zeros((10, 10, 3), np.uint8)).save(root / "masks" / "a.png")
    with pytest.raises(ImportFailed, match="a.png: the id-encoded mask has no object"):
        dataset_import(path=root, layout="tetris")
    assert not Dataset.objects.exists()


def test_command_reports_and_fails_clearly(tmp_path, media_root):
    folder = draw_dataset_folder(tmp_path / "cmd", n_images=2)
    out = io.StringIO()
    call_command(
        "import_dataset", str(folder), "--layout", "folder", "--name", "Cmd", "--no-progress", stdout=out
    )
    assert "imported dataset 'Cmd'" in out.getvalue() and "2 images, 2 instances" in out.getvalue()
    (folder / "masks" / "img01.png").unlink()
    with pytest.raises(CommandError, match="nothing was imported: .*img01.jpg: no mask"):
        call_command("import_dataset", str(folder), "--layout", "folder", "--name", "Cmd2", "--no-progress")


@pytest.mark.django_db(transaction=True)
def test_process_killed_mid_import_leaves_no_rows(tmp_path):
    """SIGKILL during the write phase: the transaction never commits, and a re-run imports cleanly."""
    folder = draw_dataset_folder(tmp_path / "big", n_images=120, size=(320, 240))
    media = tmp_path / "killed-media"
    env = worker_environment()
    env["CLICKLAB_MEDIA_ROOT"] = str(media)
    cmd = [
        sys.executable,
        "manage.py",
        "import_dataset",
        str(folder),
        "--layout",
        "folder",
        "--name",
        "Killed",
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(_files(media)) >= 5:  # the write phase has begun: files are being copied
            break
        time.sleep(0.005)
    assert proc.poll() is None, f"import finished before it could be killed:\n{proc.stdout.read().decode()}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not Dataset.objects.filter(name="Killed").exists()
    assert not Image.objects.exists()
    result = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert Dataset.objects.get(name="Killed").images.count() == 120
    assert Instance.objects.filter(image__dataset__name="Killed").count() == 120


@pytest.mark.dataset
def test_grabcut_import_21_instances_with_ignore_bands_then_nothing_changes(grabcut_root, media_root):
    out = io.StringIO()
    call_command("import_dataset", str(grabcut_root), "--layout", "grabcut", "--no-progress", stdout=out)
    assert "21 images, 21 instances, 16 with an ignore band" in out.getvalue()
    dataset = Dataset.objects.get(name="GrabCut")
    assert dataset.images.count() == 21
    assert Instance.objects.filter(image__dataset=dataset).exclude(ignore_file="").count() == 16
    scissors = Image.objects.get(dataset=dataset, stem="scissors")
    assert scissors.file.name.endswith("scissors.JPG")
    before = {p: p.stat().st_mtime_ns for p in _files(media_root)}
    out = io.StringIO()
    call_command("import_dataset", str(grabcut_root), "--layout", "grabcut", "--no-progress", stdout=out)
    assert "nothing changed" in out.getvalue()
    assert Instance.objects.count() == 21
    assert {p: p.stat().st_mtime_ns for p in _files(media_root)} == before
