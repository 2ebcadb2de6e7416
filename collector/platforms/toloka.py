"""Toloka through toloka-kit 1.2.3 (see ``../shared/spec/crowd-platforms.md`` §1, §4.1).

Mapping: one Toloka *project* per study (Classic view: a link to our entry URL, to which the view's JS
adds the assignment id, and a ``completion_code`` output); one *pool* per device class (DeviceCategory
filter), with reward, time limits, overlap, the study's "did this study" skill filter
(``Skill(id) == None``) and a fast-submit rule; *task suites* of one task each carrying a signed batch
token and the launch URL (overlap = how many workers take it). We review by hand
(``auto_accept_solutions=False``): the sync accepts or rejects from our validation result.

The SDK is frozen and pinned (toloka-kit 1.2.3, httpx <0.28, cattrs <26); everything it raises is turned
into our ``Platform*`` errors here, so nothing else imports toloka.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, timedelta
from decimal import Decimal

import httpx
from django.conf import settings
from django.core import signing
from django.utils import timezone
from django.utils.translation import gettext as _

from .base import (
    Entry,
    EntryRefused,
    ExternalSubmission,
    PlatformAdapter,
    PlatformConflict,
    PlatformCredentialsError,
    PlatformError,
    PlatformUnavailable,
    assignment_time_limit_problems,
    assignment_time_limit_s,
    register_adapter,
)

logger = logging.getLogger(__name__)

DEVICE_CATEGORIES = {"pc": "PERSONAL_COMPUTER", "mobile": "SMARTPHONE"}
_BATCH_SALT = "clicklab.toloka.batch.v1"
#: Codes look like ``123-K4QZ7M2XAB`` (collector.services.codes); the view checks the shape only.
CODE_PATTERN = r"^[0-9]+-[A-Z2-7]{10}$"
#: Toloka pays in US dollars: a pool's ``reward_per_assignment`` is a number of dollars (issue 32 item 6).
CURRENCY = "USD"

CLASSIC_MARKUP = """\
<div class="clicklab-task">
  <p>This task opens in a new tab. Click all images there as instructed; at the end you get a code.
  Paste the code below and submit. Everyone who finishes gets a code.</p>
  <p><a class="clicklab-launch" href="{{launch_url}}" target="_blank" rel="noopener">Open the task</a></p>
  <p>{{field type="input" name="completion_code" placeholder="Completion code, e.g. 123-ABCDEFGHJK"}}</p>
  <p>{{field type="input" name="problem" placeholder="Technical problem? Describe it here (optional)"}}</p>
</div>
"""

# Classic view JS: append the assignment id to the launch link (undefined in preview, where our entry
# page shows a preview only), and check the code's shape before submit.
CLASSIC_SCRIPT = """\
exports.Task = extend(TolokaHandlebarsTask, function (options) {
  TolokaHandlebarsTask.call(this, options);
}, {
  onRender: function () {
    var assignment = this.getAssignment();
    var id = assignment && assignment.getId ? assignment.getId() : undefined;
    var link = this.getDOMElement().querySelector('.clicklab-launch');
    if (link && id) {
      link.href = link.href + (link.href.indexOf('?') < 0 ? '?' : '&') +
        'toloka_assignment=' + encodeURIComponent(id);
    }
  },
  validate: function (solution) {
    var code = (solution.output_values.completion_code || '').trim().toUpperCase();
    if (!/__CODE_PATTERN__/.test(code) && !(solution.output_values.problem || '').trim()) {
      return {task_id: this.getTask().id, errors: {completion_code: {
        code: 'CODE_FORMAT', message: 'Paste the code shown at the end of the task (e.g. 123-ABCDEFGHJK).'}}};
    }
    return TolokaHandlebarsTask.prototype.validate.apply(this, arguments);
  },
  onDestroy: function () {}
});

function extend(ParentClass, constructorFunction, prototypeHash) {
  constructorFunction = constructorFunction || function () {};
  prototypeHash = prototypeHash || {};
  if (ParentClass) {
    constructorFunction.prototype = Object.create(ParentClass.prototype);
  }
  for (var i in prototypeHash) {
    constructorFunction.prototype[i] = prototypeHash[i];
  }
  return constructorFunction;
}
""".replace("__CODE_PATTERN__", CODE_PATTERN)

CLASSIC_STYLES = ".clicklab-launch { font-size: 1.2em; font-weight: bold; }"


# ------------------------------------------------------------------------------------------------
# batch tokens and URLs


def batch_token_make(*, study_id: int, pool_row_id: int) -> str:
    """Signed token carried by a task suite: names our study and pool row (hence the device)."""
    return signing.dumps({"study": study_id, "pool": pool_row_id}, salt=_BATCH_SALT, compress=False)


def batch_token_read(*, token: str) -> dict:
    try:
        payload = signing.loads(token, salt=_BATCH_SALT)
    except signing.BadSignature:
        raise EntryRefused(_("This task link is not valid. Open the task again from Toloka.")) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("pool"), int):
        raise EntryRefused(_("This task link is not valid. Open the task again from Toloka."))
    return payload


def launch_url(*, study_id: int, device: str, batch_token: str) -> str:
    return f"{settings.PUBLIC_BASE_URL}/toloka/{study_id}/{device}/?batch={batch_token}"


# ------------------------------------------------------------------------------------------------
# client and error translation


def toloka_client(*, retries: int | None = None, timeout_s: float | None = None):
    """A TolokaClient for ``settings.TOLOKA_API_URL`` built from the environment's TOLOKA_TOKEN."""
    import toloka.client as toloka

    if not settings.TOLOKA_TOKEN:
        raise PlatformCredentialsError(
            "TOLOKA_TOKEN is not set: export TOLOKA_TOKEN=<your Toloka OAuth token or API key> in the "
            "environment of the web and Celery processes (it is read from the environment only)."
        )
    return toloka.TolokaClient(
        settings.TOLOKA_TOKEN,
        url=settings.TOLOKA_API_URL,
        retries=settings.TOLOKA_RETRIES if retries is None else retries,
        timeout=settings.TOLOKA_TIMEOUT_S if timeout_s is None else timeout_s,
        retry_quotas=None,
    )


def _call(what: str, fn, *args, **kwargs):
    """Run one SDK call; translate its errors into ours (messages name the call, never the token)."""
    from toloka.client import exceptions as tx

    try:
        return fn(*args, **kwargs)
    except (tx.AuthenticationApiError, tx.AccessDeniedApiError) as exc:
        raise PlatformCredentialsError(
            f"Toloka refused {what} at {settings.TOLOKA_API_URL} ({exc.code}): check that the environment "
            "variable TOLOKA_TOKEN holds a valid, unexpired OAuth token or API key of the requester account."
        ) from None
    except tx.ConflictStateApiError as exc:
        raise PlatformConflict(f"Toloka refused {what}: {exc.message or exc.code}") from None
    except (
        tx.InternalApiError,
        tx.RemoteServiceUnavailableApiError,
        tx.TooManyRequestsApiError,
        tx.IncorrectActionsApiError,
        httpx.HTTPStatusError,  # what the SDK raises for an unexpected HTTP status
        httpx.TransportError,
    ) as exc:
        raise PlatformUnavailable(
            f"Toloka did not complete {what} after retries ({type(exc).__name__}); the action is safe to repeat: "
            "the next sync tries again."
        ) from None
    except tx.DoesNotExistApiError:
        raise PlatformError(f"Toloka says the object of {what} does not exist.") from None
    except tx.ApiError as exc:
        raise PlatformError(f"Toloka refused {what}: {exc.code} {exc.message}") from None


# ------------------------------------------------------------------------------------------------
# what we send


def fast_submit_threshold_s(*, study) -> int:
    """90% of the shortest possible batch: every trial shows phases A, B and C before a click counts."""
    per_trial_ms = study.image_ms + study.phase_b_ms() + study.blocked_ms
    return max(1, int(0.9 * study.batch_size * per_trial_ms / 1000))


def project_build(*, study):
    """The Toloka Project: Classic view linking to our entry, ``completion_code`` output."""
    import toloka.client as toloka
    from toloka.client.project.field_spec import StringSpec, UrlSpec
    from toloka.client.project.view_spec import ClassicViewSpec

    config = study.platform_config or {}
    return toloka.Project(
        public_name=config.get("public_name", "Click on objects in images"),
        public_description=config.get(
            "public_description",
            "Look at each image, then click once on the object you were shown. About 10 images.",
        ),
        public_instructions=config.get(
            "public_instructions",
            "<p>Open the task link; it opens in a new tab. For each image click once on the object shown to "
            f"you. At least {study.min_valid_per_session} of {study.batch_size} clicks must be on the object "
            "for the task to be accepted. At the end you get a code: paste it here and submit.</p>",
        ),
        private_comment=f"Clicklab study {study.pk}",
        task_spec=toloka.project.task_spec.TaskSpec(
            input_spec={"batch_token": StringSpec(hidden=True), "launch_url": UrlSpec()},
            output_spec={
                "completion_code": StringSpec(required=False, min_length=0, max_length=40),
                "problem": StringSpec(required=False, max_length=2000),
            },
            view_spec=ClassicViewSpec(markup=CLASSIC_MARKUP, script=CLASSIC_SCRIPT, styles=CLASSIC_STYLES),
        ),
    )


def pool_build(
    *,
    study,
    project_id: str,
    skill_id: str,
    device: str,
    overlap: int,
    reward: Decimal,
    qualification_skill_id: str = "",
):
    """One pool per device class: device filter, skill filter (no repeats), fast-submit rule."""
    import toloka.client as toloka
    from toloka.client import actions, collectors, conditions
    from toloka.client import filter as tfilter
    from toloka.client.quality_control import QualityControl

    config = study.platform_config or {}
    device_filter = tfilter.DeviceCategory == DEVICE_CATEGORIES[device]
    pool_filter = device_filter & (tfilter.Skill(skill_id) == None)  # noqa: E711  (SDK operator)
    if qualification_skill_id:
        # Untested workers take the test; failed ones (skill 0) no longer see the pools.
        passed_or_new = (tfilter.Skill(qualification_skill_id) == None) | (  # noqa: E711  (SDK operator)
            tfilter.Skill(qualification_skill_id) >= 100
        )
        pool_filter = pool_filter & passed_or_new
    if config.get("languages"):
        pool_filter = pool_filter & tfilter.Languages.in_(list(config["languages"]))
    if config.get("browser_only"):
        pool_filter = pool_filter & (tfilter.ClientType == tfilter.ClientType.ClientType.BROWSER)
    quality_control = QualityControl()
    quality_control.add_action(
        collector=collectors.AssignmentSubmitTime(
            history_size=5, fast_submit_threshold_seconds=fast_submit_threshold_s(study=study)
        ),
        conditions=[conditions.FastSubmittedCount > 0],
        action=actions.RestrictionV2(
            scope="PROJECT",
            duration=30,
            duration_unit="DAYS",
            private_comment="Submitted faster than possible",
        ),
    )
    return toloka.Pool(
        project_id=project_id,
        private_name=f"{study.name} [{device}]"[:200],
        may_contain_adult_content=False,
        reward_per_assignment=float(reward),
        assignment_max_duration_seconds=assignment_time_limit_s(study=study),
        will_expire=timezone.now() + timedelta(days=int(config.get("pool_days", 30))),
        auto_accept_solutions=False,
        auto_accept_period_day=int(config.get("review_days", 7)),
        defaults=toloka.Pool.Defaults(
            default_overlap_for_new_task_suites=overlap, default_overlap_for_new_tasks=overlap
        ),
        filter=pool_filter,
        quality_control=quality_control,
    )


def suite_overlaps(*, assignments: int, batches: int) -> list[int]:
    """Split ``assignments`` into at most ``batches`` task suites with overlaps differing by at most one."""
    batches = max(1, min(batches, assignments))
    base, extra = divmod(assignments, batches)
    return [base + (1 if i < extra else 0) for i in range(batches)]


# ------------------------------------------------------------------------------------------------
# the adapter


@register_adapter
class TolokaAdapter(PlatformAdapter):
    name = "toloka"
    framed = False  # the task opens our app in a new tab (iframes do not work on mobile Toloka)
    supports_bonus = True
    device_filter_server_side = True
    fee_fraction = Decimal("0.30")

    def make_client(self):
        return toloka_client()

    def launch_problems(self, *, study) -> list[str]:
        """Toloka's rules a study breaks: a currency other than Toloka's, or an assignment time limit that
        leaves the worker too little time to submit the code after the session's end."""
        problems = []
        if study.currency != CURRENCY:
            problems.append(
                f"currency: Toloka pays workers in {CURRENCY}, and study {study.pk} is in {study.currency} (Toloka "
                f"would read the reward {study.reward_per_batch} as dollars); create the study in {CURRENCY} with "
                "the reward converted at the rate you choose."
            )
        problems += assignment_time_limit_problems(study=study, platform="Toloka (the completion code)")
        return problems

    # -- worker side ------------------------------------------------------------------------------

    def parse_entry(self, *, study, device: str, params: Mapping[str, str]) -> Entry:
        """``?batch=<token>&toloka_assignment=<id>``: the assignment is checked with Toloka (it must be
        ACTIVE in the pool the batch token names), which also tells us the worker's Toloka user id."""
        from collector.models import PlatformPool

        batch = batch_token_read(token=params.get("batch", ""))
        pool = PlatformPool.objects.filter(pk=batch["pool"], campaign__study=study).first()
        if batch.get("study") != study.pk or pool is None or pool.device != device:
            raise EntryRefused(_("This task link belongs to another task. Open the task again from Toloka."))
        assignment_id = params.get("toloka_assignment", "").strip()
        if not assignment_id or assignment_id in ("undefined", "null"):
            return Entry(self.name, "", "", pool.external_id, True, device)
        # One quick attempt: the worker is waiting; a failure asks them to reload.
        client = self._client or toloka_client(retries=1, timeout_s=settings.TOLOKA_ENTRY_TIMEOUT_S)
        try:
            assignment = _call(f"reading assignment {assignment_id}", client.get_assignment, assignment_id)
        except PlatformCredentialsError:
            logger.error("toloka entry: credentials refused", extra={"study_id": study.pk})
            raise PlatformUnavailable("Toloka could not confirm your assignment.") from None
        except PlatformUnavailable:
            raise
        except PlatformError:
            raise EntryRefused(
                _("Toloka does not know this assignment. Open the task again from Toloka.")
            ) from None
        if assignment.pool_id != pool.external_id:
            raise EntryRefused(_("This assignment belongs to another task. Open the task again from Toloka."))
        if (
            str(assignment.status.value if hasattr(assignment.status, "value") else assignment.status)
            != "ACTIVE"
        ):
            raise EntryRefused(
                _("This assignment is no longer active on Toloka (submitted, expired or skipped).")
            )
        return Entry(
            platform=self.name,
            external_worker_id=str(assignment.user_id),
            external_assignment_id=assignment_id,
            external_batch_id=pool.external_id,
            is_preview=False,
            device=device,
        )

    # -- researcher side --------------------------------------------------------------------------

    def check_credentials(self) -> dict:
        requester = _call("reading the requester (token check)", self.client.get_requester)
        return {"id": requester.id, "balance": Decimal(str(requester.balance))}

    def publish(self, *, campaign) -> None:
        """Project, skill, pools and task suites, each created once (ids stored as soon as created)."""
        from collector.models import PlatformTaskBatch

        study = campaign.study
        if not campaign.external_project_id:
            project = _call("creating the project", self.client.create_project, project_build(study=study))
            campaign.external_project_id = project.id
            campaign.save(update_fields=["external_project_id"])
        if not campaign.external_skill_id:
            import toloka.client as toloka

            skill = _call(
                "creating the 'did this study' skill",
                self.client.create_skill,
                toloka.Skill(
                    name=f"clicklab-study-{study.pk}-done",
                    private_comment=f"Set for workers who submitted a batch of Clicklab study {study.pk}",
                    hidden=True,
                ),
            )
            campaign.external_skill_id = skill.id
            campaign.save(update_fields=["external_skill_id"])
        if (
            study.is_corrective
            and study.qualification_enabled
            and not campaign.external_qualification_skill_id
        ):
            import toloka.client as toloka

            skill = _call(
                "creating the qualification skill",
                self.client.create_skill,
                toloka.Skill(
                    name=f"clicklab-study-{study.pk}-qualification",
                    private_comment=(
                        f"Qualification test of Clicklab corrective study {study.pk}: 100 passed, 0 failed"
                    ),
                    hidden=True,
                ),
            )
            campaign.external_qualification_skill_id = skill.id
            campaign.save(update_fields=["external_qualification_skill_id"])
        batches_per_pool = int((study.platform_config or {}).get("task_suites_per_pool", 1))
        for pool in campaign.pools.all():
            if not pool.external_id:
                built = pool_build(
                    study=study,
                    project_id=campaign.external_project_id,
                    skill_id=campaign.external_skill_id,
                    qualification_skill_id=campaign.external_qualification_skill_id,
                    device=pool.device,
                    overlap=max(1, pool.assignments_planned),
                    reward=pool.reward_per_assignment,
                )
                created = _call(f"creating the {pool.device} pool", self.client.create_pool, built)
                pool.external_id = created.id
                pool.external_status = str(created.status.value if created.status else "")
                pool.settings_sent = _json_safe(built)
                pool.save(update_fields=["external_id", "external_status", "settings_sent"])
            if not pool.batches.exists():
                for index, overlap in enumerate(
                    suite_overlaps(assignments=max(1, pool.assignments_planned), batches=batches_per_pool)
                ):
                    PlatformTaskBatch.objects.create(pool=pool, index=index, overlap=overlap)
            token = batch_token_make(study_id=study.pk, pool_row_id=pool.pk)
            url = launch_url(study_id=study.pk, device=pool.device, batch_token=token)
            if pool.entry_url != url:
                pool.entry_url = url
                pool.save(update_fields=["entry_url"])
            self._create_suites(pool=pool, token=token, url=url)

    def _create_suites(self, *, pool, token: str, url: str) -> None:
        import toloka.client as toloka

        for batch in pool.batches.filter(external_id=""):
            suite = toloka.TaskSuite(
                pool_id=pool.external_id,
                overlap=batch.overlap,
                tasks=[toloka.Task(input_values={"batch_token": token, "launch_url": url})],
            )
            # The stored operation id makes a retried create a no-op on Toloka's side.
            result = _call(
                f"creating task suite {batch.index} of pool {pool.external_id}",
                self.client.create_task_suites,
                [suite],
                allow_defaults=True,
                operation_id=batch.operation_id,
                async_mode=True,
            )
            created = next(iter(result.items.values()), None) if result.items else None
            if created is None:
                raise PlatformError(
                    f"Toloka created no task suite for pool {pool.external_id}: {result.validation_errors}"
                )
            batch.external_id = created.id
            batch.save(update_fields=["external_id"])

    def open(self, *, pool) -> None:
        opened = _call(f"opening pool {pool.external_id}", self.client.open_pool, pool.external_id)
        pool.external_status = str(opened.status.value)
        pool.save(update_fields=["external_status"])

    def close(self, *, pool) -> None:
        if not pool.external_id:
            return
        closed = _call(f"closing pool {pool.external_id}", self.client.close_pool, pool.external_id)
        pool.external_status = str(closed.status.value)
        pool.save(update_fields=["external_status"])

    def fetch_submissions(self, *, pool) -> list[ExternalSubmission]:
        def fetch():
            return list(self.client.get_assignments(pool_id=pool.external_id, status="SUBMITTED"))

        found = []
        for assignment in _call(f"listing submitted assignments of pool {pool.external_id}", fetch):
            outputs = assignment.solutions[0].output_values if assignment.solutions else {}
            found.append(
                ExternalSubmission(
                    assignment_id=assignment.id,
                    worker_id=str(assignment.user_id or ""),
                    code=str(outputs.get("completion_code") or "").strip(),
                    submitted_at=_aware(assignment.submitted),
                    status="SUBMITTED",
                    reward=Decimal(str(assignment.reward or pool.reward_per_assignment)),
                )
            )
        return found

    def accept(self, *, pool, assignment_id: str, comment: str) -> None:
        _call(f"accepting assignment {assignment_id}", self.client.accept_assignment, assignment_id, comment)

    def reject(self, *, pool, assignment_id: str, comment: str) -> None:
        _call(f"rejecting assignment {assignment_id}", self.client.reject_assignment, assignment_id, comment)

    def assignment_status(self, *, pool, assignment_id: str) -> str:
        assignment = _call(f"reading assignment {assignment_id}", self.client.get_assignment, assignment_id)
        return str(assignment.status.value)

    def bonus(
        self, *, pool, assignment_id: str, worker_id: str, amount: Decimal, message: str, operation_id: str
    ) -> str:
        import toloka.client as toloka

        created = _call(
            f"paying a bonus for assignment {assignment_id}",
            self.client.create_user_bonus,
            toloka.UserBonus(
                user_id=worker_id,
                amount=amount,
                assignment_id=assignment_id,
                public_title={"EN": "Bonus"},
                public_message={"EN": message},
                without_message=False,
            ),
            operation_id=operation_id,
            async_mode=True,
        )
        return str(created.id)

    def mark_worker(self, *, campaign, worker_id: str) -> None:
        if not campaign.external_skill_id or not worker_id:
            return
        _call(
            f"setting the 'did this study' skill of worker {worker_id}",
            self.client.set_user_skill,
            skill_id=campaign.external_skill_id,
            user_id=worker_id,
            value=Decimal(1),
        )

    def qualification_set(self, *, campaign, worker_id: str, value: int) -> bool:
        """Set the campaign's qualification skill of ``worker_id`` to ``value`` (100 passed, 0 failed); False
        when the campaign has no qualification skill yet (published before qualification was enabled)."""
        if not campaign.external_qualification_skill_id or not worker_id:
            return False
        _call(
            f"setting the qualification skill of worker {worker_id}",
            self.client.set_user_skill,
            skill_id=campaign.external_qualification_skill_id,
            user_id=worker_id,
            value=Decimal(value),
        )
        return True

    def exclude_worker(self, *, campaign, worker_id: str, reason: str) -> None:
        import toloka.client as toloka

        _call(
            f"blocking worker {worker_id} on the project",
            self.client.set_user_restriction,
            toloka.user_restriction.ProjectUserRestriction(
                user_id=worker_id, project_id=campaign.external_project_id, private_comment=reason[:500]
            ),
        )


def _aware(value):
    if value is None:
        return None
    return value if timezone.is_aware(value) else timezone.make_aware(value, UTC)


def _json_safe(obj) -> dict:
    """The SDK object as the JSON the API received (Decimals as strings), for PlatformPool.settings_sent."""
    import json

    # the object's own unstructure() is what the SDK's converter (toloka.client.unstructure) calls for it
    return json.loads(json.dumps(obj.unstructure(), default=str))
