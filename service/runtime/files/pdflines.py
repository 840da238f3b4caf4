"""A PDF page's text lines (pdfminer's) as its paragraphs are read from them (pdfparagraphs,
pdfcontinued): a paragraph's lines (`Lines`), and a line's baseline, size, style and mark."""

from __future__ import annotations

import collections
import re
import statistics
from dataclasses import dataclass

from service.runtime.files.pdfdraw import Style

# a line ending further than this part of its box's width from its right edge ends a paragraph
SHORT_LINE = 0.25
ALIGNED = 1.0  # points within which lines' edges are one edge
SIZE_STEP = 1.15  # lines whose sizes differ by more than this ratio are two paragraphs
LIST_MARK = re.compile(r"\s*(?:[\u2022\u25e6\u25aa\u2023\u00b7]|[\u2013\u2014*-]\s|\d{1,3}[.)]\s)")


@dataclass
class Lines:
    """A paragraph's text lines (pdfminer's), the right edge of its box, how many items of
    its first line are a kept prefix (`pdfparagraphs._kept_prefix`), whether it is its
    box's first, and whether it stays as it is (it holds, or one of its lines is overlapped
    by, a character that cannot be drawn again, its prefix's apart)."""

    lines: list
    right: float
    prefix: int = 0
    first: bool = False
    kept: bool = False


def _baseline(line) -> float:
    from pdfminer.layout import LTChar

    return next(item.matrix[5] for item in line if isinstance(item, LTChar))


def _size(line) -> float:
    """The size of most of a line's characters (a superscript's apart)."""
    from pdfminer.layout import LTChar

    return statistics.median(i.size for i in line if isinstance(i, LTChar))


def _sized_apart(one, other, step: float = SIZE_STEP) -> bool:
    """Whether two lines' sizes differ by more than the ratio `step` (a heading and its
    text)."""
    return max(_size(one), _size(other)) > step * min(_size(one), _size(other))


def _leading(lines: list) -> float:
    """The pitch of a paragraph's lines; 0 for a paragraph of one line."""
    return (_baseline(lines[0]) - _baseline(lines[-1])) / (len(lines) - 1) if len(lines) > 1 else 0


def _monospaced(line) -> bool:
    from pdfminer.layout import LTChar

    return all(_style(i).family == "mono" for i in line if isinstance(i, LTChar))


def _family(line) -> str:
    """The font family of most of a line's characters but its monospaced ones (words of
    code in running text); "mono" for a line of code."""
    from pdfminer.layout import LTChar

    families = [_style(i).family for i in line if isinstance(i, LTChar)]
    text = collections.Counter(family for family in families if family != "mono")
    return text.most_common(1)[0][0] if text else "mono"


def _style(char) -> Style:
    colour = char.graphicstate.ncolor
    if isinstance(colour, int | float):
        colour = (colour,)
    try:
        colour = tuple(float(c) for c in colour or ())
    except (TypeError, ValueError):  # a pattern's name
        colour = ()
    return Style.of(char.fontname, colour)
