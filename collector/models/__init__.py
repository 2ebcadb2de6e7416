"""The domain model (see docs/architecture.md). One module per part of the flow."""

from .datasets import Dataset, DatasetImport, Image, Instance
from .sessions import DEVICES, Click, Session, Trial, Worker
from .studies import DisplayMode, Round, Study, Target

__all__ = [
    "DEVICES",
    "Click",
    "Dataset",
    "DatasetImport",
    "DisplayMode",
    "Image",
    "Instance",
    "Round",
    "Session",
    "Study",
    "Target",
    "Trial",
    "Worker",
]
from .corrective import CorrectiveClick, CorrectiveItem, CorrectiveMask, CorrectiveQualification  # noqa: E402,F401  (corrective campaigns)
from .outbox import TaskIntent  # noqa: E402,F401  (transactional outbox of Celery tasks)
from .platforms import PlatformCampaign, PlatformPool, PlatformSubmission, PlatformTaskBatch  # noqa: E402,F401  (PLATFORMS)
from .reviews import SessionReview  # noqa: E402,F401  (researcher area: manual approve/reject)
