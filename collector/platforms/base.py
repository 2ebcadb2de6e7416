"""The adapter interface every crowd platform implements, and the errors adapters raise.

One adapter per platform (``Study.platform``), looked up with :func:`get_adapter`. An adapter knows its
platform's entry parameters, how a finished worker is sent back (:class:`FinishAction`), and the
platform-side actions: publish, open, close (pause), fetch submissions, accept, reject, bonus, mark or
exclude a worker. What a platform cannot do raises :class:`PlatformNotSupported` with what to do instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

_ADAPTERS: dict[str, type[PlatformAdapter]] = {}

#: Time a platform's assignment leaves beyond our session's timeout: its clock starts when the worker takes the
#: task on the platform (before our session starts), and after the batch the worker still has to submit there
#: (paste the completion code into Toloka's form; MTurk's exit page posts to turkSubmitTo). A worker who
#: finishes a batch just before it expires has this long for that.
SUBMIT_ALLOWANCE_S = 600
#: The least of it a study's own ``platform_config["assignment_max_duration_s"]`` must leave.
SUBMIT_ALLOWANCE_MIN_S = 120


def assignment_time_limit_s(*, study) -> int:
    """The platform assignment's time limit: the session timeout plus ``SUBMIT_ALLOWANCE_S``, or the study's
    ``platform_config["assignment_max_duration_s"]`` when set (:func:`assignment_time_limit_problems` checks it
    leaves ``SUBMIT_ALLOWANCE_MIN_S``)."""
    config = study.platform_config or {}
    return int(config.get("assignment_max_duration_s", study.session_timeout_s + SUBMIT_ALLOWANCE_S))


def assignment_time_limit_problems(*, study, platform: str) -> list[str]:
    """[] or the sentence saying the study's assignment time limit leaves no time to submit on ``platform``."""
    limit = assignment_time_limit_s(study=study)
    if limit >= study.session_timeout_s + SUBMIT_ALLOWANCE_MIN_S:
        return []
    return [
        f"platform_config.assignment_max_duration_s: {limit} s leaves a worker whose batch ends at the "
        f"session timeout ({study.session_timeout_s} s) no time to submit on {platform}; use at least "
        f"{study.session_timeout_s + SUBMIT_ALLOWANCE_MIN_S} s, or remove it for the default "
        f"({study.session_timeout_s + SUBMIT_ALLOWANCE_S} s)."
    ]


@dataclass
class FinishAction:
    """What the player does when the server holds all clicks of a batch.

    ``kind``: ``show_code`` (display ``code``), ``redirect`` (go to ``url``), or ``auto_post`` (POST
    ``fields`` to ``url`` from a form, as MTurk's externalSubmit needs).
    """

    kind: str
    code: str = ""
    url: str = ""
    fields: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "code": self.code, "url": self.url, "fields": dict(self.fields)}


@dataclass(frozen=True)
class Entry:
    """What an entry URL told us. ``external_worker_id`` may come from the platform API (Toloka) rather
    than the URL; ``return_info`` holds what the exit needs (MTurk's turkSubmitTo)."""

    platform: str
    external_worker_id: str
    external_assignment_id: str
    external_batch_id: str
    is_preview: bool
    device: str
    return_info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ExternalSubmission:
    """A submitted assignment as the platform reports it."""

    assignment_id: str
    worker_id: str
    code: str
    submitted_at: datetime | None
    status: str
    reward: Decimal = Decimal("0")


class PlatformError(Exception):
    """A platform action failed; the message says which call, on what, and what to do."""


class PlatformCredentialsError(PlatformError):
    """The platform token is missing or rejected; the message names the setting (never its value)."""


class PlatformUnavailable(PlatformError):
    """The platform did not answer (5xx, timeouts) even after retries: try the same action again later."""


class PlatformConflict(PlatformError):
    """The platform refused a state change (e.g. accepting an accepted assignment, HTTP 409)."""


class PlatformNotSupported(PlatformError):
    """This platform has no such action through our integration; the message says what to do by hand."""


class EntryRefused(Exception):
    """An entry link cannot start a session; the message is shown to the worker."""


class PlatformAdapter:
    """Base: every platform-specific action. Subclasses override what their platform supports."""

    name = ""
    framed = False  # the platform shows our pages inside its own frame
    supports_bonus = False
    device_filter_server_side = False
    fee_fraction = Decimal("0")  # platform fee on rewards and bonuses, used by the budget estimate

    def __init__(self, client=None):
        self._client = client

    def make_client(self):
        """The platform's API client, built from settings (only adapters that call an API have one)."""
        raise PlatformNotSupported(f"{self.name or 'this'} platform has no API client.")

    @property
    def client(self):
        """Built on first use, so entry pages and dry runs never need credentials."""
        if self._client is None:
            self._client = self.make_client()
        return self._client

    # -- worker side ------------------------------------------------------------------------------

    def parse_entry(self, *, study, device: str, params: Mapping[str, str]) -> Entry:
        """Read an entry request's query parameters; raises EntryRefused with a message for the worker."""
        raise PlatformNotSupported(f"{self.name or 'this'} platform has no entry URL of its own.")

    def finish_action(self, *, session) -> FinishAction:
        return FinishAction(kind="show_code", code=session.completion_code)

    # -- researcher side --------------------------------------------------------------------------

    def launch_problems(self, *, study) -> list[str]:
        """Rules of the platform the study's settings break, one sentence each naming the setting (the launch
        refuses the study then); [] when it may launch."""
        return []

    def check_credentials(self) -> dict:
        """A cheap authenticated call; returns what the platform says about the account."""
        return {}

    def publish(self, *, campaign) -> None:
        """Create what the campaign needs on the platform (idempotent: finishes a half-done publish)."""

    def open(self, *, pool) -> None:
        """Start recruiting workers for ``pool``."""

    def close(self, *, pool) -> None:
        """Stop recruiting workers for ``pool`` (also used to pause: ``open`` resumes)."""

    def fetch_submissions(self, *, pool) -> list[ExternalSubmission]:
        return []

    def accept(self, *, pool, assignment_id: str, comment: str) -> None:
        raise PlatformNotSupported(
            f"accept on {self.name}: approve assignment {assignment_id} on the platform."
        )

    def reject(self, *, pool, assignment_id: str, comment: str) -> None:
        raise PlatformNotSupported(
            f"reject on {self.name}: reject assignment {assignment_id} on the platform."
        )

    def assignment_status(self, *, pool, assignment_id: str) -> str:
        """The platform's current status of an assignment (ACCEPTED, REJECTED, SUBMITTED, ...)."""
        raise PlatformNotSupported(f"{self.name} cannot report assignment status.")

    def bonus(
        self, *, pool, assignment_id: str, worker_id: str, amount: Decimal, message: str, operation_id: str
    ) -> str:
        """Pay ``amount`` once per ``operation_id``; returns the platform's bonus id."""
        raise PlatformNotSupported(f"{self.name} bonuses are not supported; pay them on the platform.")

    def mark_worker(self, *, campaign, worker_id: str) -> None:
        """Record on the platform that the worker did this study (so pools can keep them out)."""

    def qualification_set(self, *, campaign, worker_id: str, value: int) -> bool:
        """Record a corrective qualification result on the platform (a skill); False when this platform
        has no such mechanism through our integration (our table is then the allow-list the entry respects)."""
        return False

    def exclude_worker(self, *, campaign, worker_id: str, reason: str) -> None:
        raise PlatformNotSupported(f"{self.name}: block worker {worker_id} on the platform.")


def register_adapter(cls: type[PlatformAdapter]) -> type[PlatformAdapter]:
    _ADAPTERS[cls.name] = cls
    return cls


def get_adapter(platform: str) -> PlatformAdapter:
    from . import link, mturk, prolific, toloka  # noqa: F401  (register the built-in adapters)

    try:
        return _ADAPTERS[platform]()
    except KeyError:
        raise ValueError(
            f"no adapter for platform {platform!r}; known: {', '.join(sorted(_ADAPTERS))}"
        ) from None
