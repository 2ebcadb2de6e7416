"""Issue 19: no piece of the app's or the libraries' code is written twice.

CI has no duplicate finder, so this is a small one of our own. It reads every ``.py`` file on disk under the packages
(the top-level folders with an ``__init__.py``, ``tests`` excepted; migrations left out wholesale: Django writes
them, and they repeat by nature) and normalises each line: white space stripped at both ends; dropped are blank
lines, comment-only lines, lines without a letter or digit (lone brackets), and every line of an import or a
docstring (found with ``ast``). A finding is a run of ``MIN_RUN`` or more consecutive normalised lines that
stands, identical, in two places (two files, or two places of one file that do not overlap). ``MIN_RUN`` is 8: a
copied function of eight lines or more (counted after this normalisation) is caught, while the shorter repeats of the tree (a constructor's keyword
arguments passed on, a three-line guard) are not.

A pair that stays has its entry in ``ALLOWED``: both files, a line of the shared run, and the reason it stays.
An entry that matches no finding fails too, so the list says what the tree holds.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
MIN_RUN = 8
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests")
HAS_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class Allowed:
    path_a: str
    path_b: str
    contains: str  # a normalised line of the shared run, so the entry names that run and no other
    reason: str


#: Pairs that stay, each with its reason. Shorter repeats the ``duplicates`` command lists (it counts from six
#: lines, docstrings included) stay on purpose: the import lists of ``collector/platforms`` and its users; the
#: adapters' class declarations (``supports_bonus``, ``make_client``, ``parse_entry``: the interface, with other
#: values); ``SimpleClickPredictor.__init__`` restating ``IsegmPredictor``'s keyword arguments to change two
#: defaults; SAM's and SAM 2's constructors (their own parameters, documented each); and the two session closings
#: of ``collector/services/corrective.py``, which save other fields.
ALLOWED: list[Allowed] = []


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, in the file
    text: str  # normalised


@dataclass(frozen=True)
class Finding:
    path_a: str
    lines_a: tuple[int, int]
    path_b: str
    lines_b: tuple[int, int]
    text: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"{self.path_a}:{self.lines_a[0]}-{self.lines_a[1]} ~ {self.path_b}:{self.lines_b[0]}-{self.lines_b[1]}"
            f" ({len(self.text)} lines, from {self.text[0]!r})"
        )


def _skipped_lines(tree: ast.Module) -> set[int]:
    """Line numbers of imports and docstrings."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            skipped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        if isinstance(node, documented) and ast.get_docstring(node, clean=False) is not None:
            first = node.body[0]
            skipped.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return skipped


def normalised_lines(source: str) -> list[Line]:
    skipped = _skipped_lines(ast.parse(source))
    lines = []
    for number, raw in enumerate(source.splitlines(), start=1):
        text = raw.strip()
        if number in skipped or text.startswith("#") or not HAS_WORD.search(text):
            continue
        lines.append(Line(number, text))
    return lines


def app_sources() -> dict[str, list[Line]]:
    sources = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                sources[str(path.relative_to(ROOT))] = normalised_lines(path.read_text())
    return sources


def find_duplicates(sources: dict[str, list[Line]], min_run: int = MIN_RUN) -> list[Finding]:
    """Every maximal run of ``min_run`` or more normalised lines found identical in two places."""
    places = defaultdict(list)
    for path, lines in sources.items():
        texts = [line.text for line in lines]
        for start in range(len(texts) - min_run + 1):
            places[tuple(texts[start : start + min_run])].append((path, start))
    # Windows shared by two places, grouped by the pair of files and the shift between them: consecutive
    # windows with the same shift are one run.
    starts = defaultdict(set)
    for spots in places.values():
        for i, (path_a, start_a) in enumerate(spots):
            for path_b, start_b in spots[i + 1 :]:
                if path_a == path_b and start_b - start_a < min_run:
                    continue  # overlaps itself
                starts[(path_a, path_b, start_b - start_a)].add(start_a)
    findings = []
    for (path_a, path_b, shift), window_starts in starts.items():
        ordered = sorted(window_starts)
        breaks = [k for k in range(1, len(ordered)) if ordered[k] != ordered[k - 1] + 1]
        for first, end in zip([0, *breaks], [*breaks, len(ordered)], strict=True):
            run = slice(ordered[first], ordered[end - 1] + min_run)
            a = sources[path_a][run]
            b = sources[path_b][run.start + shift : run.stop + shift]
            lines_a, lines_b = (a[0].number, a[-1].number), (b[0].number, b[-1].number)
            findings.append(Finding(path_a, lines_a, path_b, lines_b, tuple(line.text for line in a)))
    return sorted(findings, key=lambda f: (f.path_a, f.lines_a, f.path_b, f.lines_b))


@cache
def _tree_findings() -> tuple[Finding, ...]:
    return tuple(find_duplicates(app_sources()))


def _allowed_by(finding: Finding) -> Allowed | None:
    for entry in ALLOWED:
        if {entry.path_a, entry.path_b} == {
            finding.path_a,
            finding.path_b,
        } and entry.contains in finding.text:
            return entry
    return None


def test_no_code_is_written_twice():
    findings = [finding for finding in _tree_findings() if _allowed_by(finding) is None]
    assert not findings, (
        f"{len(findings)} run(s) of {MIN_RUN}+ identical lines stand in two places (file:first-last line): make one "
        "piece of code serve both, or add the pair to ALLOWED in tests/config/test_duplicates.py with its reason\n  "
        + "\n  ".join(map(str, findings))
    )


def test_every_allowed_pair_is_still_found():
    stale = [
        entry for entry in ALLOWED if not any(_allowed_by(finding) is entry for finding in _tree_findings())
    ]
    assert not stale, f"ALLOWED entries that match no duplicate any more, remove them: {stale}"


def test_the_finder_names_both_places_of_a_copy():
    body = "\n".join(f"    value_{n} = compute({n}, value_{n - 1})" for n in range(1, MIN_RUN + 1))
    source = f'def original():\n    """Docstring."""\n    import os\n\n{body}\n    return value_{MIN_RUN}\n'
    copy = f"# a copy\n\n\ndef copy():\n{body}\n"
    shorter = "def shorter():\n" + "\n".join(body.splitlines()[1:]) + "\n"
    findings = find_duplicates(
        {"a.py": normalised_lines(source), "b.py": normalised_lines(copy), "c.py": normalised_lines(shorter)}
    )
    assert [str(finding).split(" (")[0] for finding in findings] == [
        f"a.py:5-{4 + MIN_RUN} ~ b.py:5-{4 + MIN_RUN}"
    ]
