"""Issue 19: rules the docs (docs/operations.md, docs/architecture.md) state, checked against the code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
CODE = "\n".join(
    path.read_text()
    for folder in ("config", "collector", "annotation_ui", "exports", "tasks")
    for path in (ROOT / folder).rglob("*.py")
    if "migrations" not in path.parts
)

#: What docs/operations.md's `-Q default` worker line says that worker runs, and the task module of each.
QUEUE_JOBS = {
    "validation": "tasks.validation.",
    "stimuli": "tasks.stimuli.",
    "platform sync": "tasks.platforms.",
    "session expiry": "tasks.sessions.",
    "dataset imports": "tasks.datasets.",
}


def test_every_environment_variable_the_docs_document_is_read_by_the_code():
    """The table is generated from config/environment.py (tests/config/test_environment.py checks both ways);
    this one only checks that each name in it is read by some code, by the registry or a library."""
    table = OPERATIONS.split("<!-- settings-table:start", 1)[1].split("<!-- settings-table:end -->", 1)[0]
    names = sorted(set(re.findall(r"^\| `([A-Z][A-Z0-9_]{2,})`", table, flags=re.M)))
    assert len(names) > 15, table
    code = CODE + "\n".join(
        path.read_text()
        for folder in ("evaluation", "benchmark", "segmenters")
        for path in (ROOT / folder).rglob("*.py")
    )
    unread = [name for name in names if f'read("{name}"' not in code and f'environ.get("{name}"' not in code]
    assert not unread, (
        f"docs/operations.md documents {unread}, which no code reads: read them or drop them from config/environment.py."
    )


def test_the_default_queue_runs_what_the_docs_say_and_exports_are_not_queued():
    from config.celery import app

    app.loader.import_default_modules()
    names = [name for name in app.tasks if name.startswith("tasks.")]
    line = next(line for line in OPERATIONS.splitlines() if "worker -Q default " in line)
    jobs = [job.strip() for job in line.split("#", 1)[1].split(",")]
    assert set(jobs) == set(QUEUE_JOBS), (
        f"docs/operations.md's default worker line names {jobs}: keep QUEUE_JOBS in step"
    )
    for job, prefix in QUEUE_JOBS.items():
        assert any(name.startswith(prefix) for name in names), f"no task runs {job!r} ({prefix}*): {names}"
    assert not [name for name in names if "export" in name]  # exports run in the request, admin action or CLI
    assert (
        "`default` (validation, stimuli, platform sync, session expiry, dataset imports; exports run where"
        in ARCHITECTURE
    )


def test_coordinates_are_documented_in_the_canonical_frame_the_exports_use():
    assert "original-image pixels" not in ARCHITECTURE
    assert "in the image's canonical frame" in ARCHITECTURE
    selectors = (ROOT / "exports" / "selectors.py").read_text()
    assert '"instance__image__width"' in selectors and "original_width" not in selectors
