"""A griffe extension for the API reference: read this package's docstrings as they are written.

The docstrings are numpy-style with reStructuredText mathematics. Before griffe parses them this
extension rewrites, on a copy of the text (the sources are not touched):

* ``.. math::`` blocks into ``$$ ... $$`` blocks (wrapped in ``aligned`` when they use ``&`` or
  ``\\``), and ``:math:`...``` roles into ``\\( ... \\)``, for ``pymdownx.arithmatex``;
* the other roles (``:func:``, ``:class:``, ``:mod:``, ``:meth:``, ``:data:``, ...) into code spans;
* a paragraph that follows a list section (Parameters, Returns, Raises, ...) at the left margin but
  is not one of its entries: numpy-style parsers read it as a parameter, so it is moved into a
  ``Notes`` section;
* a reStructuredText heading whose title is not a numpy section into a bold line.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# the numpy sections whose bodies are lists of entries
_LIST_SECTIONS = {
    "parameters",
    "other parameters",
    "type parameters",
    "returns",
    "yields",
    "receives",
    "raises",
    "warns",
    "attributes",
    "functions",
    "methods",
    "classes",
    "modules",
    "type aliases",
}
_TEXT_SECTIONS = {
    "notes",
    "note",
    "warnings",
    "warning",
    "examples",
    "example",
    "references",
    "see also",
    "deprecated",
}
_KNOWN = _LIST_SECTIONS | _TEXT_SECTIONS

# an entry: "name", "name : type", "a, b : type", "*args", or (Returns, Raises) a bare type
_NAME_ENTRY = re.compile(r"^\*{0,2}\w+(\s*,\s*\*{0,2}\w+)*\s*(:.*)?$")
_TYPE_ENTRY = re.compile(r"^[\w.\[\], |()]+$")
_ROLE = re.compile(r":(?:py:)?(\w+):`~?([^`]+)`")
_DASH = re.compile(r"^\s*-{3,}\s*$")


def _is_heading(lines: list[str], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and bool(lines[i].strip())
        and _DASH.match(lines[i + 1]) is not None
        and not lines[i].startswith(" ")
    )


def _is_entry(line: str, section: str) -> bool:
    if _NAME_ENTRY.match(line):
        return True
    if section in {"returns", "yields", "receives", "raises", "warns"}:
        # a bare type such as "Tensor (n, k)"; a sentence ends with a full stop
        return _TYPE_ENTRY.match(line) is not None and not line.rstrip().endswith(".")
    return False


def _move_trapped_prose(lines: list[str]) -> list[str]:
    """Put left-margin paragraphs found inside list sections into a Notes section at the end."""
    kept: list[str] = []
    moved: list[list[str]] = []
    section = ""
    trapping = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _is_heading(lines, i):
            section = line.strip().lower()
            trapping = False
            kept += [line, lines[i + 1]]
            i += 2
            continue
        starts_paragraph = i > 0 and not lines[i - 1].strip()
        at_margin = bool(line.strip()) and not line.startswith(" ")
        if section in _LIST_SECTIONS and at_margin and starts_paragraph:
            trapping = not _is_entry(line, section)
            if trapping:
                moved.append([])
        if trapping and line.strip():
            moved[-1].append(line)
        elif trapping:
            pass  # the blank line that ends a moved paragraph
        else:
            kept.append(line)
        i += 1
    if not moved:
        return lines
    while kept and not kept[-1].strip():
        kept.pop()
    headings = [kept[i].strip().lower() for i in range(len(kept)) if _is_heading(kept, i)]
    out = [*kept, ""]
    if not headings or headings[-1] not in {"notes", "note"}:
        out += ["Notes", "-----"]
    for para in moved:
        out += [*para, ""]
    return out


def _math_blocks(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(\s*)\.\. math::\s*(.*)$", line)
        if not m:
            out.append(line)
            i += 1
            continue
        indent, inline = m.group(1), m.group(2)
        body = [inline] if inline else []
        i += 1
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
        ):
            body.append(lines[i].strip())
            i += 1
        while body and not body[-1]:
            body.pop()
        while body and not body[0]:
            body.pop(0)
        tex = [b for b in body if b]
        if any("&" in b or b.endswith("\\\\") for b in tex):
            tex = ["\\begin{aligned}", *tex, "\\end{aligned}"]
        if out and out[-1].strip():
            out.append("")
        out += [indent + "$$", *(indent + t for t in tex), indent + "$$"]
        if i < len(lines) and lines[i].strip():
            out.append("")
    return out


def _roles(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        kind, target = m.group(1), m.group(2)
        if kind == "math":
            return "\\(" + target + "\\)"
        if m.group(0).split("`")[1].startswith("~"):
            target = target.rsplit(".", 1)[-1]
        return "``" + target + "``"

    return _ROLE.sub(repl, text)


def _headings(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _is_heading(lines, i) and lines[i].strip().lower() not in _KNOWN:
            out.append("**" + lines[i].strip() + "**")
            i += 2
            continue
        out.append(lines[i])
        i += 1
    return out


def rewrite(text: str) -> str:
    """The docstring ``text`` in the form the numpy parser and Markdown read as intended."""
    lines = _roles(text).split("\n")
    lines = _math_blocks(lines)
    lines = _headings(lines)
    lines = _move_trapped_prose(lines)
    return "\n".join(lines)


class RSTDocstrings(griffe.Extension):
    """Rewrite every docstring with :func:`rewrite` when griffe loads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
