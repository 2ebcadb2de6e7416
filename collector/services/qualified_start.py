"""After a passed qualification test: the worker's real session (issue 17 item 4). Above both
``qualification`` (which scores the test) and ``session_start`` (which starts a session and asks
``qualification`` whether the worker is admitted), so neither imports the other back."""

from __future__ import annotations

from django.utils.translation import gettext as _

from collector.models import Session
from collector.services.qualification import not_qualified_message, qualification_result
from collector.services.session_start import SessionStartRefused, session_start


def qualification_continue(*, session: Session) -> Session:
    """After a passed test: start (or resume) the worker's real session on the same device and assignment.
    Raises ``SessionStartRefused`` (failed test, study closed, nothing left) with the worker's message."""
    if not session.is_qualification or session.status != Session.Status.FINISHED:
        raise SessionStartRefused(_("This is not a finished qualification test."))
    result = qualification_result(study=session.study, worker=session.worker)
    if result is None or not result.passed:
        raise SessionStartRefused(not_qualified_message())
    return session_start(
        study=session.study,
        worker=session.worker,
        device=session.device,
        platform_device=session.platform_device,
        detected_device=session.detected_device,
        user_agent=session.user_agent,
        client_info=session.client_info,
        platform_assignment_id=session.platform_assignment_id,
        platform_batch_id=session.platform_batch_id,
    )
