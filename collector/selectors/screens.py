"""The screens a worker sees before a timed batch (issue 32 item 5): consent and instructions, per language.

A study's ``consent_texts`` and ``instructions_texts`` hold the researcher's own text per language code
(``settings.LANGUAGES``); a language without one (or with only white space) gets the shipped default,
translated in that language: ``DEFAULT_CONSENT``, and the numbered steps of ``default_instruction_steps``
(the display mode and the phase durations spelled out). The player page (``annotation_ui.views``) and the
full export (``exports.full``, which records what each session was shown) read the same function,
``study_screens``. Texts are plain text: the page escapes them and turns blank lines into paragraphs.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from collector.models import DisplayMode, Study

DEFAULT_CONSENT = gettext_lazy(
    "This task is part of a research study of how people point at objects in pictures. We record your "
    "clicks, their timing and your screen's size and type; we record nothing else about you (no name, no "
    "contact details). Taking part is voluntary: you can stop at any time by closing this page. Press "
    "“I agree” if you agree to take part."
)


def seconds_text(ms: int) -> str:
    """Milliseconds as a short seconds string for instructions: 1500 -> "1.5", 2000 -> "2"."""
    return f"{ms / 1000:.2f}".rstrip("0").rstrip(".")


def screen_language(language: str | None = None) -> str:
    """The code of ``settings.LANGUAGES`` a language tag (``ru``, ``ru-RU``; None: the active language) maps
    to, or the site's ``LANGUAGE_CODE``."""
    tag = (language or translation.get_language() or settings.LANGUAGE_CODE).lower()
    codes = [code for code, _name in settings.LANGUAGES]
    for candidate in (tag, tag.split("-")[0]):
        if candidate in codes:
            return candidate
    return settings.LANGUAGE_CODE


def _phase_b_sentence(study: Study, a: str, b: str) -> str:
    values = {"a": a, "b": b}
    mode = study.display_mode
    if mode == DisplayMode.TEXT_DESCRIPTION:
        return (
            _(
                "After you press START, an image is shown for %(a)s seconds, followed by a short text describing the "
                "object of interest for %(b)s seconds. You cannot click during this time."
            )
            % values
        )
    if mode == DisplayMode.SHIFTED_CUTOUT:
        return (
            _(
                "After you press START, an image is shown for %(a)s seconds, followed by the object of interest cut "
                "out and moved to the top-left corner of a gray background for %(b)s seconds. You cannot click "
                "during this time."
            )
            % values
        )
    if mode == DisplayMode.SILHOUETTE_MASK:
        return (
            _(
                "After you press START, an image is shown for %(a)s seconds, followed by a black-and-white "
                "silhouette of the object of interest for %(b)s seconds. You cannot click during this time."
            )
            % values
        )
    if mode == DisplayMode.HIGHLIGHTED_INSTANCE:
        return (
            _(
                "After you press START, an image is shown for %(a)s seconds, followed by the same image with the "
                "object of interest outlined in green for %(b)s seconds. You cannot click during this time."
            )
            % values
        )
    return (
        _(
            "After you press START, an image is shown for %(a)s seconds, followed by the object of interest on a "
            "gray background for %(b)s seconds. You cannot click during this time."
        )
        % values
    )


def default_instruction_steps(
    *, study: Study, trial_count: int, practice_count: int, correction: bool
) -> list[str]:
    """The shipped instructions, one string per numbered step, in the active language. ``trial_count``: the
    batch's trials after the practice ones; ``correction``: a round after the first (the target may be part
    of an object)."""
    phase_b = _phase_b_sentence(study, seconds_text(study.image_ms), seconds_text(study.phase_b_ms()))
    if correction:
        phase_b += " " + _(
            "The object of interest may be only a part of an object, or a part of the background."
        )
    steps = [
        _(
            "First the images of the task are loaded. The START button becomes active when the first image is "
            "ready; the others load while you work."
        ),
        phase_b,
        _(
            "Then you see the original image again. After %(c)s seconds, when the note “Click now” appears, "
            "select the object that was indicated in the previous step with one click (or tap)."
        )
        % {"c": seconds_text(study.blocked_ms)},
        ngettext(
            "To complete the task, process %(n)s image in sequence.",
            "To complete the task, process %(n)s images in sequence.",
            trial_count,
        )
        % {"n": trial_count}
        + " "
        + _(
            "Stay on this page while an image is shown: switching to another tab or window, or resizing the "
            "window, makes that answer invalid."
        ),
    ]
    if practice_count:
        steps.insert(
            3,
            ngettext(
                "You start with %(n)s practice image: it does not count.",
                "You start with %(n)s practice images: they do not count.",
                practice_count,
            )
            % {"n": practice_count},
        )
    return steps


def _own_text(texts: dict | None, language: str) -> str:
    text = (texts or {}).get(language)
    return text.strip() if isinstance(text, str) else ""


def study_screens(
    *,
    study: Study,
    language: str | None = None,
    trial_count: int,
    practice_count: int = 0,
    correction: bool = False,
) -> dict:
    """What the worker sees before the batch, in ``language`` (None: the active one)::

    {"language": "ru",
     "consent": {"shown": bool, "source": "study" | "default", "text": str},
     "instructions": {"source": "study" | "default", "text": str (the study's own, else the steps
                      joined by line breaks), "steps": [str] (the default steps; [] for the study's own)}}
    """
    code = screen_language(language)
    with translation.override(code):
        consent = _own_text(study.consent_texts, code)
        instructions = _own_text(study.instructions_texts, code)
        steps = (
            []
            if instructions
            else default_instruction_steps(
                study=study, trial_count=trial_count, practice_count=practice_count, correction=correction
            )
        )
        return {
            "language": code,
            "consent": {
                "shown": bool(study.consent_enabled),
                "source": "study" if consent else "default",
                "text": consent or str(DEFAULT_CONSENT),
            },
            "instructions": {
                "source": "study" if instructions else "default",
                "text": instructions or "\n".join(f"{n}. {step}" for n, step in enumerate(steps, start=1)),
                "steps": steps,
            },
        }
