"""collector.selectors.permissions: who may see and steer which study."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Group, User
from django.http import Http404

from collector.selectors.permissions import (
    studies_visible_to,
    study_visible_or_404,
    user_can_change_study,
    user_can_view_study,
    user_is_researcher,
)
from tests.factories import make_researcher

pytestmark = pytest.mark.django_db


def test_a_researcher_sees_own_study_and_not_anothers(alice, bob, alice_study, bob_study):
    assert list(studies_visible_to(alice)) == [alice_study]
    assert list(studies_visible_to(bob)) == [bob_study]
    assert user_can_view_study(alice, alice_study)
    assert not user_can_view_study(alice, bob_study)
    assert not user_can_view_study(bob, alice_study)


def test_a_shared_study_is_visible_once_but_not_changeable(alice, bob, alice_study):
    alice_study.researchers.add(bob, alice)  # alice listed too: no duplicate row
    assert list(studies_visible_to(bob)) == [alice_study]
    assert list(studies_visible_to(alice)) == [alice_study]
    assert user_can_view_study(bob, alice_study)
    assert not user_can_change_study(bob, alice_study)
    assert user_can_change_study(alice, alice_study)


def test_superuser_sees_and_changes_everything(alice_study, bob_study):
    root = User.objects.create_superuser("root", password="pw-for-tests-1")
    assert set(studies_visible_to(root)) == {alice_study, bob_study}
    assert user_can_view_study(root, bob_study) and user_can_change_study(root, bob_study)


def test_owner_who_is_no_longer_a_researcher_sees_nothing(alice, alice_study):
    alice.is_staff = False
    alice.save()
    alice.groups.clear()
    assert not user_is_researcher(alice)
    assert list(studies_visible_to(alice)) == []
    assert not user_can_view_study(alice, alice_study)


def test_group_membership_alone_makes_a_researcher(alice_study):
    member = make_researcher("member", staff=False)
    assert user_is_researcher(member)
    plain = User.objects.create_user("plain", password="pw-for-tests-1")
    assert not user_is_researcher(plain)
    plain.groups.add(Group.objects.get(name="researchers"))
    assert user_is_researcher(plain)


def test_anonymous_and_inactive_users_see_nothing(alice, alice_study):
    assert list(studies_visible_to(AnonymousUser())) == []
    assert not user_can_view_study(AnonymousUser(), alice_study)
    assert not user_can_view_study(None, alice_study)
    alice.is_active = False
    alice.save()
    assert not user_can_view_study(alice, alice_study)


def test_a_study_you_may_not_see_answers_like_one_that_does_not_exist(alice, bob, alice_study, bob_study):
    assert study_visible_or_404(user=alice, study_id=alice_study.pk) == alice_study
    with pytest.raises(Http404) as hidden:
        study_visible_or_404(user=alice, study_id=bob_study.pk)
    with pytest.raises(Http404) as missing:
        study_visible_or_404(user=alice, study_id=bob_study.pk + 1000)
    assert str(hidden.value) == f"study {bob_study.pk} does not exist or is not shared with you."
    assert str(missing.value) == f"study {bob_study.pk + 1000} does not exist or is not shared with you."
    alice_study.researchers.add(bob)
    assert study_visible_or_404(user=bob, study_id=alice_study.pk) == alice_study
    with pytest.raises(Http404):
        study_visible_or_404(user=AnonymousUser(), study_id=alice_study.pk)
