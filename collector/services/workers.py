"""Workers: platform identities and the pseudonyms that replace them everywhere outside the database."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from django.db import IntegrityError, transaction

from collector.models import Worker


def worker_pseudonym(*, platform: str, external_id: str) -> str:
    """Stable, unguessable pseudonym: HMAC-SHA256(SECRET_KEY, platform:id), 24 hex characters."""
    key = hashlib.sha256(("clicklab.worker.pseudonym:" + settings.SECRET_KEY).encode()).digest()
    digest = hmac.new(key, f"{platform}:{external_id}".encode(), hashlib.sha256).hexdigest()
    return "w" + digest[:23]


def worker_create(*, platform: str, external_id: str) -> Worker:
    """A new worker with a platform id nobody has yet (one the caller just minted, e.g. a random link
    worker id): one INSERT, without the lookup of ``worker_get_or_create``. A taken id raises IntegrityError."""
    if not external_id:
        raise ValueError("a worker needs a platform id.")
    return Worker.objects.create(
        platform=platform,
        external_id=external_id,
        pseudonym=worker_pseudonym(platform=platform, external_id=external_id),
    )


def worker_get_or_create(*, platform: str, external_id: str) -> Worker:
    """The worker with this platform id, created on first sight (safe under concurrent calls)."""
    if not external_id:
        raise ValueError("a worker needs a platform id; the entry link did not carry one.")
    existing = Worker.objects.filter(platform=platform, external_id=external_id).first()
    if existing:
        return existing
    try:
        with transaction.atomic():
            return Worker.objects.create(
                platform=platform,
                external_id=external_id,
                pseudonym=worker_pseudonym(platform=platform, external_id=external_id),
            )
    except IntegrityError:
        return Worker.objects.get(platform=platform, external_id=external_id)
