"""Issue 20.2: no file under MEDIA_ROOT reaches anyone but a researcher allowed to see it, DEBUG on or off.

Every file the app wrote (originals, ground-truth masks, ignore bands, next-round masks, rendered stimuli) is
requested anonymously under every prefix a server could map onto MEDIA_ROOT, and through the stimulus views
with the token of an annotator of another study; nothing comes back. Researchers get them through the
login-checked view MEDIA_URL points at (the admin's file links use it), within the per-study rule.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from django.test import Client
from django.urls import clear_url_caches

from collector.models import Instance
from collector.services.session_start import session_start
from collector.services.stimuli import target_stimuli_ensure
from collector.services.tokens import session_token_make
from tests.factories import (
    make_correction_round,
    make_correction_target,
    make_dataset,
    make_researcher,
    make_study,
    make_worker,
)
from tests.support.media_probe import leaks, media_files, probe_urls

# what is served does not depend on the database or the broker: the PostgreSQL run only
pytestmark = [pytest.mark.django_db, pytest.mark.one_backend]


def _reload_urls():
    import config.urls

    clear_url_caches()
    importlib.reload(config.urls)


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings, two_studies):
    """DEBUG as a deployment would have it when the URL configuration is built (it is read at import, as
    MEDIA_ROOT is: so after ``two_studies`` set it)."""
    settings.DEBUG = request.param
    _reload_urls()
    yield request.param
    settings.DEBUG = False
    _reload_urls()


@pytest.fixture
def two_studies(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    owner = make_researcher()
    dataset_a = make_dataset(tmp_path, n_images=2, ignore_band=True)
    study_a = make_study(dataset_a, publish=True, owner=owner)
    round_1 = study_a.rounds.get(number=1)
    for target in round_1.targets.all():
        target_stimuli_ensure(target=target)
    correction = make_correction_target(
        make_correction_round(study_a), instance=Instance.objects.filter(image__dataset=dataset_a).first(),
        click_type="fn",
    )  # fmt: skip
    study_b = make_study(make_dataset(tmp_path, n_images=1, seed=5), publish=True, batch_size=1)
    session_b = session_start(
        study=study_b, worker=make_worker(), device="pc", user_agent="Mozilla/5.0 (test)"
    )
    return {
        "owner": owner,
        "study_a": study_a,
        "correction": correction,
        "token_b": session_token_make(session_id=session_b.pk),
        "positions_b": list(session_b.trials.values_list("position", flat=True)),
        "root": Path(settings.MEDIA_ROOT),
    }


def test_no_file_under_media_root_reaches_an_anonymous_visitor_or_another_studys_annotator(
    two_studies, debug
):
    root = two_studies["root"]
    files = media_files(root)
    kinds = {path.relative_to(root).parts[0] for path in files}
    assert {"datasets", "rounds", "stimuli"} <= kinds, kinds  # originals, masks, next-round masks, stimuli
    client = Client()
    leaked = []
    for path, url in probe_urls(root):
        response = client.get(url)
        body = b"".join(response) if response.streaming else response.content
        if leaks(response.status_code, body, path):
            leaked.append(url)
        if url.startswith("/researcher/files/"):
            assert response.status_code == 302 and "/researcher/login/" in response["Location"], url
    token = two_studies["token_b"]
    for path in files:
        for position in two_studies["positions_b"]:
            for kind in ("display", "target"):
                url = f"/api/annotator/{token}/stimulus/{position}/{kind}/{path.name}"
                response = client.get(url)
                body = b"".join(response) if response.streaming else response.content
                assert response.status_code == 404, url
                assert not leaks(response.status_code, body, path), url
    assert not leaked, leaked[:5]


def test_researchers_get_files_through_the_login_checked_view_within_the_study_rule(
    two_studies, admin_client
):
    root, study_a, correction = two_studies["root"], two_studies["study_a"], two_studies["correction"]
    instance = Instance.objects.filter(image__dataset=study_a.dataset).select_related("image").first()
    owner, stranger = Client(), Client()
    owner.force_login(two_studies["owner"])
    stranger.force_login(make_researcher())
    for name in (instance.image.file.name, instance.mask_file.name, correction.previous_mask_file.name):
        url = f"/researcher/files/{name}"
        assert url == instance.image.file.storage.url(name)  # FieldFile.url (admin links) lands on the view
        response = owner.get(url)
        assert response.status_code == 200, url
        assert b"".join(response) == (root / name).read_bytes()
        assert response["Cache-Control"] == "private, no-store"
    # datasets are shared by the site's researchers (the study form lists them all); a study's files are not
    assert stranger.get(f"/researcher/files/{instance.mask_file.name}").status_code == 200
    assert stranger.get(f"/researcher/files/{correction.previous_mask_file.name}").status_code == 404
    # a file no row names, a path that climbs out, and a logged-in non-researcher
    (root / "stray.png").write_bytes(b"\x89PNG stray")
    assert owner.get("/researcher/files/stray.png").status_code == 404
    assert owner.get("/researcher/files/../secret_key").status_code == 404
    plain = make_researcher(staff=False)
    plain.groups.clear()
    visitor = Client()
    visitor.force_login(plain)
    assert visitor.get(f"/researcher/files/{instance.mask_file.name}").status_code == 403
    # the admin's file links (FieldFile.url) point at the view, never at a served folder
    page = admin_client.get(f"/admin/collector/instance/{instance.pk}/change/").content.decode()
    assert f'href="/researcher/files/{instance.mask_file.name}"' in page and "/media/" not in page


def test_media_root_inside_a_served_folder_is_a_system_check_error(settings, tmp_path):
    from collector.checks import media_root_is_never_served

    assert media_root_is_never_served() == []
    settings.MEDIA_ROOT = Path(settings.STATIC_ROOT) / "media"
    assert [error.id for error in media_root_is_never_served()] == ["clicklab.E001"]
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.MEDIA_URL = "/media/"
    assert [error.id for error in media_root_is_never_served()] == ["clicklab.E002"]
