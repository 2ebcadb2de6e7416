"""The shipped catalogues (``locale/<lang>/LC_MESSAGES/{django,djangojs}.po`` and their ``.mo``): every string
marked for translation is in them, every entry is translated (no fuzzy, no empty, placeholders kept), and each
``.mo`` is the compiled form of its ``.po``.

Pure Python: the marked strings are found the way ``makemessages`` finds them (Python's ``ast`` for gettext
calls, Django's own ``templatize`` for templates, the literal argument of ``gettext(...)`` in JavaScript), so
a machine without GNU gettext (``apt-get install gettext``, needed only to *update* the catalogues with
``make messages``) runs these tests too. Whenever one fails, run ``make messages``, translate what it added and
commit the ``.po`` and ``.mo`` together.
"""

from __future__ import annotations

import ast
import gettext
import json
import os
import re
import struct
from pathlib import Path

import pytest
from django.conf import settings
from django.utils.translation.template import templatize

from tests.support.po_files import LOCALE_DIR, Entry, parse_po

ROOT = Path(settings.BASE_DIR)
LANGUAGES = [code for code, _name in settings.LANGUAGES if code != settings.LANGUAGE_CODE]
DOMAINS = ["django", "djangojs"]
#: Directories ``make messages`` passes to makemessages as ``--ignore`` (hidden ones are skipped too).
IGNORED_DIRS = {".venv", "node_modules", "var", "tests", "bench", "benchmark"}
PYTHON_KEYWORDS = {"_", "gettext", "gettext_lazy", "gettext_noop", "ngettext", "ngettext_lazy"}
TEMPLATE_SUFFIXES = {".html", ".txt"}
pytestmark = pytest.mark.one_backend  # no database, no broker: the embedded-default run need not repeat it
FIX = "run `make messages`, translate what it added and commit the .po and .mo together"


def _source_files(suffixes: set[str]):
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(
            name for name in subfolders if name not in IGNORED_DIRS and not name.startswith(".")
        )
        for name in sorted(files):
            if Path(name).suffix in suffixes:
                yield Path(folder) / name


def _python_marked(path: Path) -> set[tuple[str, str | None]]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        if name not in PYTHON_KEYWORDS:
            continue
        texts = [arg.value if isinstance(arg, ast.Constant) else None for arg in node.args[:2]]
        assert isinstance(texts[0], str), (
            f"{path}:{node.lineno}: {name}() of a non-literal cannot be extracted"
        )
        plural = texts[1] if name.startswith("ngettext") else None
        found.add((texts[0], plural))
    return found


_LITERAL = r"""u?('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
_TEMPLATE_CALL = re.compile(rf"\b(n?gettext)\(\s*{_LITERAL}(?:\s*,\s*{_LITERAL})?")


def _template_marked(path: Path) -> set[tuple[str, str | None]]:
    found = set()
    for name, singular, plural in _TEMPLATE_CALL.findall(templatize(path.read_text(encoding="utf-8"))):
        found.add((ast.literal_eval(singular), ast.literal_eval(plural) if name == "ngettext" else None))
    return found


_JS_CALL = re.compile(r"""\bgettext\(\s*("(?:[^"\\]|\\.)*")\s*\)""")
#: ``gettext(`` not followed by a double-quoted literal: only the wrappers that forward their ``text``.
_JS_OTHER_CALL = re.compile(r"""\bgettext\((?!\s*")(?!text\))""")


def _javascript_marked(path: Path) -> set[tuple[str, str | None]]:
    source = path.read_text(encoding="utf-8")
    unparsed = _JS_OTHER_CALL.search(source)
    assert unparsed is None, (
        f"{path}: gettext( at offset {unparsed.start()} has no double-quoted literal argument; makemessages "
        'cannot extract it, so mark the string itself: gettext("...")'
    )
    return {(json.loads(literal), None) for literal in _JS_CALL.findall(source)}


def marked_strings(domain: str) -> set[tuple[str, str | None]]:
    """(msgid, msgid_plural) of every string marked in the sources ``makemessages -d <domain>`` reads."""
    found: set[tuple[str, str | None]] = set()
    if domain == "djangojs":
        for path in _source_files({".js"}):
            found |= _javascript_marked(path)
        return found
    for path in _source_files({".py"} | TEMPLATE_SUFFIXES):
        found |= _python_marked(path) if path.suffix == ".py" else _template_marked(path)
    return found


def _catalogue(language: str, domain: str) -> tuple[Path, Path]:
    folder = LOCALE_DIR / language / "LC_MESSAGES"
    po, mo = folder / f"{domain}.po", folder / f"{domain}.mo"
    assert po.exists(), f"{po} is missing: {FIX}"
    assert mo.exists(), f"{mo} is missing: {FIX}"
    return po, mo


def _nplurals(header: Entry) -> int:
    match = re.search(r"nplurals\s*=\s*(\d+)", header.msgstr[0])
    assert match, "the .po header has no Plural-Forms"
    return int(match.group(1))


CASES = [(language, domain) for language in LANGUAGES for domain in DOMAINS]


@pytest.mark.parametrize(("language", "domain"), CASES)
def test_every_marked_string_is_in_the_catalogue_and_nothing_else(language, domain):
    po, _mo = _catalogue(language, domain)
    in_po = {(entry.msgid, entry.msgid_plural) for entry in parse_po(po)[1:] if not entry.obsolete}
    marked = marked_strings(domain)
    assert len(marked) > 10, (
        f"found only {len(marked)} marked strings for {domain}: is the extraction broken?"
    )
    missing = sorted(marked - in_po, key=str)
    stale = sorted(in_po - marked, key=str)
    assert not missing, f"{po}: {len(missing)} marked string(s) not in the catalogue ({FIX}): {missing}"
    assert not stale, f"{po}: {len(stale)} entr(y/ies) no longer marked anywhere ({FIX}): {stale}"


@pytest.mark.parametrize(("language", "domain"), CASES)
def test_every_entry_is_translated_keeps_its_placeholders_and_is_not_fuzzy(language, domain):
    po, _mo = _catalogue(language, domain)
    header, *entries = parse_po(po)
    assert header.msgid == "" and "fuzzy" not in header.flags, f"{po}: the header is fuzzy ({FIX})"
    assert f"Language: {language}\n" in header.msgstr[0], f"{po}: the header names no Language: {language}"
    nplurals = _nplurals(header)
    problems = []
    for entry in entries:
        where = f"{entry.msgid[:60]!r}"
        forms = nplurals if entry.msgid_plural is not None else 1
        if entry.obsolete:
            problems.append(f"{where}: obsolete (#~)")
        if "fuzzy" in entry.flags:
            problems.append(f"{where}: fuzzy")
        if len(entry.msgstr) != forms or not all(text.strip() for text in entry.msgstr):
            problems.append(f"{where}: {forms} non-empty translation(s) wanted, got {entry.msgstr}")
        for pattern in (r"%\(\w+\)s", r"\{\w+\}", r"%s"):
            wanted = sorted(re.findall(pattern, entry.msgid))
            if any(sorted(re.findall(pattern, text)) != wanted for text in entry.msgstr):
                problems.append(f"{where}: placeholders {wanted} not kept in {entry.msgstr}")
    assert not problems, f"{po}:\n" + "\n".join(problems)


@pytest.mark.parametrize(("language", "domain"), CASES)
def test_the_mo_is_the_compiled_po(language, domain):
    po, mo = _catalogue(language, domain)
    header, *entries = parse_po(po)
    data = mo.read_bytes()
    magic, _revision, count = struct.unpack("<3I", data[:12])
    assert magic == 0x950412DE, f"{mo} is not a little-endian .mo file ({FIX})"
    with mo.open("rb") as handle:
        catalog = gettext.GNUTranslations(handle)._catalog
    expected = {"": header.msgstr[0]}
    for entry in entries:
        if entry.msgid_plural is None:
            expected[entry.msgid] = entry.msgstr[0]
        else:
            expected.update({(entry.msgid, index): text for index, text in enumerate(entry.msgstr)})
    stale = sorted(
        (key for key in expected.keys() | catalog.keys() if key and catalog.get(key) != expected.get(key)),
        key=str,
    )
    assert count == 1 + len(entries) and not stale, (
        f"{mo} holds {count - 1} messages and {po} {len(entries)}; out of step: {stale[:10]} "
        f"(compile it: `make messages` or `manage.py compilemessages`)"
    )
