"""Logging a researcher in through the login form in a real browser (the researcher-area browser tests)."""

from __future__ import annotations

PASSWORD = "pw-for-tests-1"  # tests.factories.make_researcher's default


def researcher_log_in(page, base_url: str, username: str) -> None:
    """Open the researcher area, which sends a visitor to the login form, log in as ``username`` and wait for
    the study list."""
    page.goto(f"{base_url}/researcher/")
    assert "/researcher/login/" in page.url, page.url
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("#study-list")
