"""Worker pseudonyms (collector.services.workers): made once, stored, and kept through a key rotation, so an
export of a running study never splits a worker into two pseudonyms."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings

from collector.models import Worker
from collector.services.workers import worker_create, worker_get_or_create, worker_pseudonym

OLD_KEY = "old-" + "o" * 60
NEW_KEY = "new-" + "n" * 60


def test_a_pseudonym_is_w_and_23_hex_characters_and_differs_by_platform_and_id():
    with override_settings(SECRET_KEY=OLD_KEY):
        one = worker_pseudonym(platform="toloka", external_id="u-1")
        assert re.fullmatch(r"w[0-9a-f]{23}", one)
        assert one == worker_pseudonym(platform="toloka", external_id="u-1")
        assert one != worker_pseudonym(platform="prolific", external_id="u-1")
        assert one != worker_pseudonym(platform="toloka", external_id="u-2")
    with override_settings(SECRET_KEY=NEW_KEY):
        assert worker_pseudonym(platform="toloka", external_id="u-1") != one  # keyed: unguessable


@pytest.mark.django_db
def test_a_worker_keeps_the_stored_pseudonym_after_a_rotation_and_a_change_of_derivation():
    with override_settings(SECRET_KEY=OLD_KEY, SECRET_KEY_FALLBACKS=[]):
        first = worker_get_or_create(platform="toloka", external_id="u-1")
    # a worker stored by the code before issue 35 (its pseudonym another derivation's)
    legacy = Worker.objects.create(
        platform="prolific", external_id="p-1", pseudonym="w" + "0123456789abcdef" + "0" * 7
    )
    with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[OLD_KEY]):
        again = worker_get_or_create(platform="toloka", external_id="u-1")
        assert (again.pk, again.pseudonym) == (first.pk, first.pseudonym)
        assert worker_get_or_create(platform="prolific", external_id="p-1").pseudonym == legacy.pseudonym
        newcomer = worker_create(platform="toloka", external_id="u-2")
        assert newcomer.pseudonym == worker_pseudonym(platform="toloka", external_id="u-2")
    with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[]):
        assert worker_get_or_create(platform="toloka", external_id="u-1").pseudonym == first.pseudonym
    assert Worker.objects.filter(platform="toloka", external_id="u-1").count() == 1
