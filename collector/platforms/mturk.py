"""Amazon Mechanical Turk through boto3: an ExternalQuestion HIT per device class (``crowd-platforms.md`` §4.2).

MTurk shows our entry URL inside an iframe on its site and appends ``assignmentId``, ``hitId``,
``workerId`` and ``turkSubmitTo``; in preview ``assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE`` (we show a
preview, no session, no timers). At the end the player POSTs ``assignmentId`` and the completion code to
``<turkSubmitTo>/mturk/externalSubmit`` (an auto-submitted form). ``turkSubmitTo`` must be one of
``settings.MTURK_SUBMIT_ORIGINS``. The framed pages send a CSP frame-ancestors allow-list
(``collector.platforms.framing``) and use no cookies.

The boto3 client is built with ``endpoint_url`` from settings (``MTURK_ENDPOINT_URL``, else the sandbox or
production endpoint by ``MTURK_SANDBOX``) and the AWS keys from the environment.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlsplit
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from .base import (
    Entry,
    EntryRefused,
    ExternalSubmission,
    FinishAction,
    PlatformAdapter,
    PlatformConflict,
    PlatformCredentialsError,
    PlatformError,
    PlatformUnavailable,
    assignment_time_limit_problems,
    assignment_time_limit_s,
    register_adapter,
)

PREVIEW_ASSIGNMENT = "ASSIGNMENT_ID_NOT_AVAILABLE"
SANDBOX_ENDPOINT = "https://mturk-requester-sandbox.us-east-1.amazonaws.com"
PRODUCTION_ENDPOINT = "https://mturk-requester.us-east-1.amazonaws.com"
EXTERNAL_QUESTION_SCHEMA = (
    "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd"
)
ANSWER_FIELD = "completion_code"
STATUS_FROM_MTURK = {"Submitted": "SUBMITTED", "Approved": "ACCEPTED", "Rejected": "REJECTED"}


def entry_url(*, study_id: int, device: str) -> str:
    return f"{settings.PUBLIC_BASE_URL}/mturk/{study_id}/{device}/"


def external_question_xml(*, url: str, frame_height_px: int = 0) -> str:
    """The ExternalQuestion document; ``frame_height_px`` 0 lets MTurk size the frame to the window."""
    if not url.startswith("https://"):
        raise PlatformError(
            f"MTurk needs an HTTPS ExternalURL, got {url!r}: set PUBLIC_BASE_URL to the https:// address of "
            "this server."
        )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<ExternalQuestion xmlns="{EXTERNAL_QUESTION_SCHEMA}">'
        f"<ExternalURL>{escape(url)}</ExternalURL>"
        f"<FrameHeight>{int(frame_height_px)}</FrameHeight>"
        "</ExternalQuestion>"
    )


def hit_params(
    *, study, device: str, url: str, max_assignments: int, reward: Decimal, qualification_id: str
) -> dict:
    """Arguments of ``create_hit`` for one device class (MTurk cannot filter devices: the title says it)."""
    config = study.platform_config or {}
    device_words = {"pc": "on a computer (mouse)", "mobile": "on a phone (touch)"}[device]
    requirements = []
    if qualification_id:
        requirements.append(
            {
                "QualificationTypeId": qualification_id,
                "Comparator": "DoesNotExist",
                "ActionsGuarded": "DiscoverPreviewAndAccept",
            }
        )
    return {
        "Title": config.get("public_name", f"Click on objects in images {device_words}")[:128],
        "Description": config.get(
            "public_description",
            f"Look at about {study.batch_size} images and click once on the object shown, {device_words}.",
        )[:2000],
        "Keywords": "image, click, segmentation, research",
        "Reward": f"{Decimal(reward):.2f}",
        "MaxAssignments": int(max_assignments),
        "LifetimeInSeconds": int(config.get("pool_days", 30)) * 24 * 3600,
        "AssignmentDurationInSeconds": assignment_time_limit_s(study=study),
        "AutoApprovalDelayInSeconds": int(config.get("review_days", 7)) * 24 * 3600,
        "Question": external_question_xml(url=url, frame_height_px=int(config.get("frame_height_px", 0))),
        "RequesterAnnotation": f"clicklab study {study.pk} {device}"[:255],
        "QualificationRequirements": requirements,
    }


def answer_code(answer_xml: str) -> str:
    """The ``completion_code`` free-text answer of an assignment's QuestionFormAnswers document."""
    if not answer_xml:
        return ""
    try:
        root = ElementTree.fromstring(answer_xml)
    except ElementTree.ParseError:
        return ""
    for answer in root.iter():
        if not answer.tag.endswith("Answer") or answer.tag.endswith("Answers"):
            continue
        fields = {child.tag.rsplit("}", 1)[-1]: (child.text or "") for child in answer}
        if fields.get("QuestionIdentifier") == ANSWER_FIELD:
            return fields.get("FreeText", "").strip()
    return ""


def mturk_client():
    import boto3

    if not (settings.AWS_ACCESS_KEY_ID and settings.AWS_SECRET_ACCESS_KEY):
        raise PlatformCredentialsError(
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set: export the MTurk requester's keys in "
            "the environment of the web and Celery processes."
        )
    endpoint = settings.MTURK_ENDPOINT_URL or (
        SANDBOX_ENDPOINT if settings.MTURK_SANDBOX else PRODUCTION_ENDPOINT
    )
    return boto3.client(
        "mturk",
        region_name=settings.MTURK_REGION,
        endpoint_url=endpoint,
        aws_access_key_id=settings.AWS_ACCESS_KEY_ID,
        aws_secret_access_key=settings.AWS_SECRET_ACCESS_KEY,
    )


def _call(what: str, fn, **kwargs):
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(**kwargs)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        if code in (
            "UnrecognizedClientException",
            "InvalidClientTokenId",
            "SignatureDoesNotMatch",
            "AccessDenied",
        ):
            raise PlatformCredentialsError(
                f"MTurk refused {what} ({code}): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in the environment."
            ) from None
        if code == "RequestError" and "status" in message.lower():
            raise PlatformConflict(f"MTurk refused {what}: {message}") from None
        if code == "ServiceFault":
            raise PlatformUnavailable(
                f"MTurk did not complete {what} (ServiceFault); try again later."
            ) from None
        raise PlatformError(f"MTurk refused {what}: {code} {message}") from None
    except BotoCoreError as exc:
        raise PlatformUnavailable(
            f"MTurk did not answer {what} ({type(exc).__name__}); try again later."
        ) from None


@register_adapter
class MTurkAdapter(PlatformAdapter):
    name = "mturk"
    framed = True
    supports_bonus = True
    device_filter_server_side = False
    fee_fraction = Decimal("0.20")

    def make_client(self):
        return mturk_client()

    # -- worker side ------------------------------------------------------------------------------

    def parse_entry(self, *, study, device: str, params: Mapping[str, str]) -> Entry:
        assignment = (params.get("assignmentId") or "").strip()[:200]
        hit = (params.get("hitId") or "").strip()[:200]
        if not assignment or assignment == PREVIEW_ASSIGNMENT:
            return Entry(self.name, "", "", hit, True, device)
        worker = (params.get("workerId") or "").strip()[:200]
        submit_to = (params.get("turkSubmitTo") or "").strip().rstrip("/")
        if not worker:
            raise EntryRefused(_("This link is missing your MTurk worker id. Open the HIT again from MTurk."))
        parts = urlsplit(submit_to)
        origin = f"{parts.scheme}://{parts.netloc}"
        if (
            parts.scheme not in ("https", "http")
            or origin not in settings.MTURK_SUBMIT_ORIGINS
            or parts.path not in ("", "/")
        ):
            raise EntryRefused(
                _("This link does not come from MTurk (turkSubmitTo). Open the HIT again from MTurk.")
            )
        return Entry(
            platform=self.name,
            external_worker_id=worker,
            external_assignment_id=assignment,
            external_batch_id=hit,
            is_preview=False,
            device=device,
            return_info={"turk_submit_to": origin, "hit_id": hit},
        )

    def launch_problems(self, *, study) -> list[str]:
        """An assignment time limit that leaves the worker too little time to submit after the session's end."""
        return assignment_time_limit_problems(study=study, platform="MTurk")

    def finish_action(self, *, session) -> FinishAction:
        submit_to = (session.platform_state or {}).get("turk_submit_to", "")
        if not submit_to:
            return FinishAction(kind="show_code", code=session.completion_code)
        return FinishAction(
            kind="auto_post",
            code=session.completion_code,
            url=f"{submit_to}/mturk/externalSubmit",
            fields={"assignmentId": session.platform_assignment_id, ANSWER_FIELD: session.completion_code},
        )

    # -- researcher side --------------------------------------------------------------------------

    def check_credentials(self) -> dict:
        balance = _call("reading the account balance", self.client.get_account_balance)
        return {"balance": Decimal(str(balance.get("AvailableBalance", "0")))}

    def publish(self, *, campaign) -> None:
        study = campaign.study
        if not campaign.external_skill_id:
            created = _call(
                "creating the 'did this study' qualification",
                self.client.create_qualification_type,
                Name=f"clicklab-study-{study.pk}-done-{uuid.uuid4().hex[:6]}",
                Description=f"Did Clicklab study {study.pk}",
                QualificationTypeStatus="Active",
            )
            campaign.external_skill_id = created["QualificationType"]["QualificationTypeId"]
            campaign.save(update_fields=["external_skill_id"])
        for pool in campaign.pools.filter(external_id=""):
            url = entry_url(study_id=study.pk, device=pool.device)
            params = hit_params(
                study=study, device=pool.device, url=url, max_assignments=max(1, pool.assignments_planned),
                reward=pool.reward_per_assignment, qualification_id=campaign.external_skill_id,
            )  # fmt: skip
            created = _call(
                f"creating the {pool.device} HIT",
                self.client.create_hit,
                UniqueRequestToken=f"clicklab-{study.pk}-{pool.pk}",
                **params,
            )
            pool.external_id = created["HIT"]["HITId"]
            pool.external_status = created["HIT"].get("HITStatus", "Assignable")
            pool.entry_url = url
            pool.settings_sent = {k: v for k, v in params.items()}
            pool.save(update_fields=["external_id", "external_status", "entry_url", "settings_sent"])

    def open(self, *, pool) -> None:
        days = int((pool.campaign.study.platform_config or {}).get("pool_days", 30))
        _call(
            f"opening HIT {pool.external_id}",
            self.client.update_expiration_for_hit,
            HITId=pool.external_id,
            ExpireAt=timezone.now() + timedelta(days=days),
        )
        pool.external_status = "Assignable"
        pool.save(update_fields=["external_status"])

    def close(self, *, pool) -> None:
        if not pool.external_id:
            return
        # A past expiry date closes a HIT at once (MTurk's documented way to stop a HIT early).
        _call(
            f"closing HIT {pool.external_id}",
            self.client.update_expiration_for_hit,
            HITId=pool.external_id,
            ExpireAt=datetime(2015, 1, 1, tzinfo=UTC),
        )
        pool.external_status = "Unassignable"
        pool.save(update_fields=["external_status"])

    def fetch_submissions(self, *, pool) -> list[ExternalSubmission]:
        found, token = [], None
        while True:
            kwargs = {"HITId": pool.external_id, "AssignmentStatuses": ["Submitted"], "MaxResults": 100}
            if token:
                kwargs["NextToken"] = token
            page = _call(
                f"listing assignments of HIT {pool.external_id}",
                self.client.list_assignments_for_hit,
                **kwargs,
            )
            for item in page.get("Assignments", []):
                found.append(
                    ExternalSubmission(
                        assignment_id=item["AssignmentId"],
                        worker_id=item.get("WorkerId", ""),
                        code=answer_code(item.get("Answer", "")),
                        submitted_at=item.get("SubmitTime"),
                        status="SUBMITTED",
                        reward=pool.reward_per_assignment,
                    )
                )
            token = page.get("NextToken")
            if not token:
                return found

    def accept(self, *, pool, assignment_id: str, comment: str) -> None:
        _call(f"approving assignment {assignment_id}", self.client.approve_assignment,
              AssignmentId=assignment_id, RequesterFeedback=comment[:1024])  # fmt: skip

    def reject(self, *, pool, assignment_id: str, comment: str) -> None:
        _call(f"rejecting assignment {assignment_id}", self.client.reject_assignment,
              AssignmentId=assignment_id, RequesterFeedback=comment[:1024])  # fmt: skip

    def assignment_status(self, *, pool, assignment_id: str) -> str:
        item = _call(
            f"reading assignment {assignment_id}", self.client.get_assignment, AssignmentId=assignment_id
        )
        return STATUS_FROM_MTURK.get(
            item["Assignment"]["AssignmentStatus"], item["Assignment"]["AssignmentStatus"]
        )

    def bonus(
        self, *, pool, assignment_id: str, worker_id: str, amount: Decimal, message: str, operation_id: str
    ) -> str:
        _call(
            f"paying a bonus for assignment {assignment_id}",
            self.client.send_bonus,
            WorkerId=worker_id,
            BonusAmount=f"{Decimal(amount):.2f}",
            AssignmentId=assignment_id,
            Reason=message[:1024],
            UniqueRequestToken=str(operation_id)[:64],
        )
        return str(operation_id)

    def mark_worker(self, *, campaign, worker_id: str) -> None:
        if not campaign.external_skill_id or not worker_id:
            return
        _call(
            f"marking worker {worker_id}",
            self.client.associate_qualification_with_worker,
            QualificationTypeId=campaign.external_skill_id,
            WorkerId=worker_id,
            IntegerValue=1,
            SendNotification=False,
        )
