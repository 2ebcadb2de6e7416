"""Workers: platform identities and the pseudonyms that replace them everywhere outside the database."""

from __future__ import annotations

from django.core import signing
from django.db import IntegrityError, transaction

from collector.models import Worker

_PSEUDONYM_SALT = "clicklab.worker.pseudonym.v2"


def worker_pseudonym(*, platform: str, external_id: str) -> str:
    """An unguessable pseudonym for a worker seen for the first time: ``w`` + 23 hex characters of Django's
    signature (HMAC-SHA256, SECRET_KEY, a purpose salt) of ``platform:id``.

    Computed once, when the Worker row is created, and stored: a worker seen again is found by platform id
    and keeps the stored pseudonym, so neither a key rotation nor a change of this derivation (issue 35
    replaced an HMAC keyed with a hash of SECRET_KEY) gives a worker of a running study a second pseudonym.
    Nothing is verified against it, so it needs no fallback keys."""
    signature = signing.Signer(salt=_PSEUDONYM_SALT).signature(f"{platform}:{external_id}")
    return "w" + signing.b64_decode(signature.encode()).hex()[:23]


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
