"""A reader of gettext .po files (the shipped catalogues under ``locale/``), in pure Python: no polib, no
GNU gettext tools, so the catalogue tests run on a machine without them."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

LOCALE_DIR = Path(settings.BASE_DIR) / "locale"


@dataclass
class Entry:
    msgid: str
    msgid_plural: str | None = None
    msgstr: list[str] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    obsolete: bool = False


def parse_po(path: Path) -> list[Entry]:
    """The entries of a .po file, the header (msgid "") first; msgstr[i] in order for plural entries."""
    entries: list[Entry] = []
    flags: set[str] = set()
    key = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        obsolete = raw.startswith("#~")
        line = raw[2:].strip() if obsolete else raw.strip()
        if line.startswith("#,"):  # flags come before the msgid they belong to
            flags |= {flag.strip() for flag in line[2:].split(",")}
            continue
        if not line or line.startswith("#"):
            continue
        keyword, literal = ("", line) if line.startswith('"') else line.split(" ", 1)
        value = ast.literal_eval(literal)
        if keyword == "msgid":
            entries.append(Entry(msgid=value, flags=flags, obsolete=obsolete))
            flags = set()
        elif keyword == "msgid_plural":
            entries[-1].msgid_plural = value
        elif keyword.startswith("msgstr"):
            entries[-1].msgstr.append(value)
        key = keyword or key
        if not keyword:  # a continuation line of the last keyword
            last = entries[-1]
            if key == "msgid":
                last.msgid += value
            elif key == "msgid_plural":
                last.msgid_plural += value
            else:
                last.msgstr[-1] += value
    return entries
