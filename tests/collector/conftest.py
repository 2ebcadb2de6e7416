"""Fixtures of the researcher-area tests (pages and API): two researchers with a small study each."""

from __future__ import annotations

import pytest

from tests.factories import make_dataset, make_researcher, make_study


@pytest.fixture
def dataset(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return make_dataset(tmp_path, n_images=3)


@pytest.fixture
def alice():
    return make_researcher("alice")


@pytest.fixture
def bob():
    return make_researcher("bob")


@pytest.fixture
def alice_study(dataset, alice):
    return make_study(
        dataset, publish=True, name="Alice's study", owner=alice, batch_size=3, min_valid_per_session=2
    )


@pytest.fixture
def bob_study(dataset, bob):
    return make_study(
        dataset, publish=True, name="Bob's study", owner=bob, batch_size=3, min_valid_per_session=2
    )
