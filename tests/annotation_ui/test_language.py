"""The annotator's language: a browser asking for Russian (Accept-Language) gets the entry page, the player
page, the JavaScript catalogue and the service's refusals in Russian; any other browser keeps English."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from collector.models import Study
from collector.services.session_start import session_start
from collector.services.tokens import session_token_make, study_link_token_make
from tests.annotation_ui.driver import LAYOUTS, entry_url, open_player, wait_start_enabled
from tests.factories import make_dataset, make_study, make_worker
from tests.support.po_files import LOCALE_DIR, parse_po

RUSSIAN = {"HTTP_ACCEPT_LANGUAGE": "ru-RU,ru;q=0.9,en;q=0.8"}
#: Latin words left in translated text: names and the codes the instructions quote.
LATIN_ALLOWED = {"JavaScript"}


@pytest.fixture
def study(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=4, size=(64, 48))
    return make_study(dataset, publish=True, batch_size=3)


def _link(study) -> str:
    return reverse("annotation_ui:study_link", kwargs={"token": study_link_token_make(study_id=study.pk)})


def _section(html: str, element_id: str) -> str:
    """The visible text of the element with ``element_id`` up to the end of its section (tags dropped)."""
    start = html.index(f'id="{element_id}"')
    end = html.index("</section>", start) if "</section>" in html[start:] else len(html)
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html[html.index(">", start) + 1 : end])).split())


def _latin_words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z]{3,}", text)) - LATIN_ALLOWED


@pytest.mark.django_db
def test_a_russian_browser_gets_the_entry_and_player_pages_in_russian(client, study):
    entry = client.get(_link(study), **RUSSIAN)
    html = entry.content.decode()
    assert entry.status_code == 200 and '<html lang="ru">' in html
    assert "Запускаем задание…" in html and "Продолжить" in html
    assert not _latin_words(_section(html, "entry-form")) and "Starting the task" not in html
    assert entry["Content-Language"] == "ru" and "Accept-Language" in entry["Vary"]

    player = client.post(_link(study), {"device": "pc"}, **RUSSIAN)
    html = player.content.decode()
    assert player.status_code == 200 and '<html lang="ru">' in html
    instructions = _section(html, "screen-instructions")
    assert "Инструкция" in instructions and "НАЧАТЬ" in instructions and "«Кликните сейчас»" in instructions
    assert "обработайте по очереди 3 изображения." in instructions  # the plural form for 3
    assert not _latin_words(instructions), f"English left in the instructions: {_latin_words(instructions)}"


@pytest.mark.django_db
def test_a_russian_browser_gets_the_corrective_player_in_russian(client, tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    dataset = make_dataset(tmp_path, n_images=2, size=(64, 48))
    study = make_study(dataset, publish=True, kind="corrective", batch_size=2, quota_pc=1, quota_mobile=1)
    html = client.post(_link(study), {"device": "pc"}, **RUSSIAN).content.decode()
    assert '<html lang="ru">' in html and "<title>Исправьте маску</title>" in html
    instructions = _section(html, "screen-instructions")
    assert "«Обновить маску»" in instructions and "НАЧАТЬ" in instructions
    assert not _latin_words(instructions), f"English left in the instructions: {_latin_words(instructions)}"
    toolbar = _section(html, "screen-item")
    assert "Маска в порядке" in toolbar and not _latin_words(toolbar), _latin_words(toolbar)


@pytest.mark.django_db
def test_other_browsers_keep_english(client, study):
    for headers in ({}, {"HTTP_ACCEPT_LANGUAGE": "de-DE,de;q=0.9"}, {"HTTP_ACCEPT_LANGUAGE": "en-GB"}):
        html = Client().post(_link(study), {"device": "pc"}, **headers).content.decode()
        assert '<html lang="en">' in html and "Instructions" in html and "Инструкция" not in html
        assert "To complete the task, process 3 images in sequence." in html


def test_the_javascript_catalogue_is_russian_for_a_russian_browser(client):
    url = reverse("annotation_ui:jsi18n")
    russian = client.get(url, **RUSSIAN).content.decode()
    english = client.get(url).content.decode()
    for entry in parse_po(LOCALE_DIR / "ru" / "LC_MESSAGES" / "djangojs.po")[1:]:
        # The catalogue is a JSON object of msgid -> msgstr (non-ASCII escaped).
        pair = f"{json.dumps(entry.msgid)}: {json.dumps(entry.msgstr[0])}"
        assert pair in russian, f"{entry.msgid!r} is not translated in {url}"
        assert json.dumps(entry.msgstr[0]) not in english
    assert json.dumps("Кликните сейчас") in russian


@pytest.mark.django_db
def test_refusals_reach_a_russian_worker_in_russian(client, study):
    Study.objects.filter(pk=study.pk).update(state=Study.State.PAUSED)
    refused = client.post(_link(study), {"device": "pc"}, **RUSSIAN)
    assert refused.status_code == 409 and "Нет доступных заданий" in refused.content.decode()
    assert "Задание сейчас закрыто (состояние исследования: paused)." in refused.content.decode()
    forged = client.get(reverse("annotation_ui:study_link", kwargs={"token": "forged"}), **RUSSIAN)
    assert forged.status_code == 404 and "ссылка на исследование недействительна" in forged.content.decode()

    Study.objects.filter(pk=study.pk).update(state=Study.State.PUBLISHED)
    session = session_start(study=Study.objects.get(pk=study.pk), worker=make_worker(), device="pc")
    token = session_token_make(session_id=session.pk)
    finish = reverse("annotation_ui:api_finish", kwargs={"token": token})
    body = client.post(finish, data="{}", content_type="application/json", **RUSSIAN).json()
    assert body["message"] == f"в сеансе {session.pk} ещё нет кликов для изображений: 0, 1, 2."
    english = client.post(finish, data="{}", content_type="application/json").json()
    assert english["message"] == f"session {session.pk} still lacks clicks for trial(s) 0, 1, 2."
    bad = client.post(
        reverse("annotation_ui:api_finish", kwargs={"token": "forged"}), data="{}", content_type="application/json",
        **RUSSIAN,
    ).json()  # fmt: skip
    assert bad["message"].startswith("ссылка на задание недействительна")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_chromium_in_russian_sees_the_player_in_russian(chromium, player_server, tmp_path):
    study = make_study(make_dataset(tmp_path, n_images=2, size=(64, 48)), publish=True, batch_size=2)
    context = chromium.new_context(**LAYOUTS["desktop"], locale="ru-RU")
    page = context.new_page()
    try:
        open_player(page, entry_url(player_server.url, study))
        wait_start_enabled(page)  # the JavaScript catalogue has loaded and the player wrote its "ready" line
        assert page.evaluate("document.documentElement.lang") == "ru"
        assert page.inner_text("#instructions-title") == "Инструкция"
        assert page.inner_text("#start-button") == "НАЧАТЬ"
        assert (
            page.inner_text("#loading-text") == "Готово. Остальные изображения загрузятся, пока вы работаете."
        )
    finally:
        context.close()
