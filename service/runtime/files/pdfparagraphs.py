"""A PDF page's text boxes read as paragraphs (`_boxes`): pdfminer's boxes cut where a
line is short, of another size, a list's mark or code, or beside the line before (a
table's cells); lines that continue the paragraph above them though boxed apart from it
(a list item's, running text's) joined to it again (pdfcontinued); each paragraph its runs
of one style and the geometry its translation is drawn in (pdfdraw.Box).
Characters that cannot be drawn again (rotated, of a Type3 or vertical font, invisible,
unmapped) keep their paragraph as it was, but for a list's mark before its text."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from service.runtime.files.pdfcontinued import _continued
from service.runtime.files.pdfdraw import Align, Box, Style
from service.runtime.files.pdflines import (
    ALIGNED,
    LIST_MARK,
    SHORT_LINE,
    Lines,
    _baseline,
    _leading,
    _monospaced,
    _size,
    _sized_apart,
    _style,
)
from service.runtime.files.pdftext import WORD_MARGIN

HYPHENS = ("-", "\u00ad")  # a line ending in one, before a lower-case letter, is one word


@dataclass
class Read:
    """A text box read: its runs' texts, the Box drawn, its page's index and characters."""

    runs: list[str]
    box: Box
    page: int
    chars: list


def _boxes(page, index: int) -> list[Read]:
    """The horizontal text boxes of pdfminer's `page` (in forms too), read as paragraphs,
    each paragraph's continuation boxed apart taken back into it (`_continued`)."""
    from pdfminer.layout import LTContainer, LTTextBoxHorizontal

    found: list[Lines] = []

    def walk(container) -> None:
        for item in container:
            if isinstance(item, LTTextBoxHorizontal):
                found.extend(_grouped(item))
            elif isinstance(item, LTContainer):
                walk(item)

    walk(page)
    read = [_read_lines(group, index) for group in _continued(found) if not group.kept]
    return [paragraph for paragraph in read if paragraph is not None]


def _grouped(box) -> list[Lines]:
    """A box's paragraphs (`_paragraphs`); kept as they are, those with a character that
    cannot be drawn again as it stands (rotated, not upright, of a Type3 or vertical font,
    invisible, unmapped) or a line such a character overlaps (a circle drawn round a
    letter), but for their kept prefix (a list's mark in such a font)."""
    from pdfminer.layout import LTChar

    lines = [line for line in box if any(isinstance(item, LTChar) for item in line)]
    chars = [item for line in lines for item in line if isinstance(item, LTChar)]
    kept = [char for char in chars if not _redrawable(char)]
    groups = []
    for number, group in enumerate(_paragraphs(lines, box)):
        prefix = _kept_prefix(group[0])
        own = list(group[0])[:prefix]
        held = [item for line in group for item in line][prefix:]
        others = [char for char in kept if all(char is not item for item in own)]
        stays = any(isinstance(i, LTChar) and not _redrawable(i) for i in held) or any(
            _overlap(line, char) for line in group for char in others
        )
        groups.append(Lines(group, box.x1, prefix, number == 0, stays))
    return groups


def _overlap(one, other) -> bool:
    return one.x0 < other.x1 and other.x0 < one.x1 and one.y0 < other.y1 and other.y0 < one.y1


def _kept_prefix(line) -> int:
    """How many of a line's first items are characters that cannot be drawn again (a
    list's mark in a Type3 or unmapped font) before its first that can, with the space
    after them; 0 where no space parts them from its text, or nothing follows."""
    from pdfminer.layout import LTChar

    items = list(line)
    marks = 0
    while marks < len(items) and isinstance(items[marks], LTChar):
        if _redrawable(items[marks]) or items[marks].get_text().isspace():
            break
        marks += 1
    end = marks
    while end < len(items) and items[end].get_text().isspace():
        end += 1
    text = any(isinstance(item, LTChar) and _redrawable(item) for item in items[end:])
    return end if marks and end > marks and text else 0


def _paragraphs(lines: list, box) -> list[list]:
    """A box's lines in paragraphs: a line starting with a list's mark (in a font that
    draws again or not: `_kept_prefix`), or after a line that ends short of the box's right
    edge (a paragraph's last line), or of another size than the line before (a heading over
    its text, which the layout analysis may box with it), or beside the line before rather
    than under it (a table's cells, which it may box together), starts one; a line of
    monospaced text (code) is one."""
    groups: list[list] = []
    for line in lines:
        after = groups[-1][-1] if groups else None
        if (
            after is None
            or _baseline(after) - _baseline(line) < 0.5 * _size(line)
            or after.x1 < box.x1 - SHORT_LINE * box.width
            or _sized_apart(line, after)
            or LIST_MARK.match(line.get_text())
            or _kept_prefix(line)
            or _monospaced(line)
            or _monospaced(after)
        ):
            groups.append([])
        groups[-1].append(line)
    return groups


def _read_lines(group: Lines, index: int) -> Read | None:
    """A paragraph's runs and geometry, its kept prefix left out: it starts after it."""
    from pdfminer.layout import LTChar

    lines = group.lines
    shown = [list(lines[0])[group.prefix :]] + [list(line) for line in lines[1:]]
    pieces: list[tuple[str, Style | None]] = []
    for items in shown:
        pieces += [
            (i.get_text(), _style(i) if isinstance(i, LTChar) else None) for i in _spaced(items)
        ]
    runs, styles = _runs(_joined(pieces))
    if not runs:
        return None
    chars = [item for items in shown for item in items if isinstance(item, LTChar)]
    size = statistics.median(char.size for char in chars)
    first, last = _baseline(lines[0]), _baseline(lines[-1])
    leading = _leading(lines)
    starts = [next(i.x0 for i in shown[0] if isinstance(i, LTChar))]
    starts += [line.x0 for line in lines[1:]]
    ends = [line.x1 for line in lines]
    justified = _justified([_spaced(items) for items in shown], starts, ends, group.right)
    align = "justify" if justified else _alignment(starts, ends)
    # a list item's lines under its text, its first line out to its mark: a hanging indent
    hanging = align in ("left", "justify") and len(starts) > 1 and starts[0] < min(starts[1:])
    x0 = min(starts[1:]) if hanging else min(starts)
    drawn = Box(
        x0,
        min(line.y0 for line in lines),
        group.right,
        max(line.y1 for line in lines),
        first,
        last,
        size,
        leading if leading > 0 else size * 1.2,
        styles,
        indent=starts[0] - x0,
        align=align,
    )
    drawn.placed = list(enumerate(runs))  # drawn as it was until translated
    return Read(runs, drawn, index, chars)


def _spaced(items: list) -> list:
    """A line's characters and the spaces the layout analysis put between them, less those
    beside a space character (the gap after it is its word spacing, `Tw`, or a TJ array's
    offset: one space) and those that letter spacing alone made (a gap wider than
    WORD_MARGIN of a character's size is a space to it, though the gap is the text's
    character spacing, `Tc`)."""
    from pdfminer.layout import LTAnno, LTChar

    kept = []
    for number, item in enumerate(items):
        before, after = items[number - 1 : number], items[number + 1 : number + 2]
        if isinstance(item, LTAnno) and item.get_text() == " " and before and after:
            if any(isinstance(i, LTChar) and i.get_text().isspace() for i in before + after):
                continue
            if (
                isinstance(before[0], LTChar)
                and isinstance(after[0], LTChar)
                and _letter_spaced(before[0], after[0])
            ):
                continue
        kept.append(item)
    return kept


def _letter_spaced(before, after) -> bool:
    """Whether the gap between two characters is no wider than a word's without the
    character spacing of the operator that showed the first."""
    shown = getattr(before, "shown", None)
    spacing = shown.spacing * before.matrix[0] if shown is not None else 0.0
    gap = after.x0 - before.x1 - spacing
    return spacing > 0 and gap <= WORD_MARGIN * max(after.width, after.height)


def _alignment(starts: list[float], ends: list[float]) -> Align:
    """ "right" or "center" where a paragraph's lines start apart and end (or are centred)
    together; else "left" (a paragraph of one line among them)."""
    centres = [(start + end) / 2 for start, end in zip(starts, ends, strict=True)]
    if len(starts) < 2 or max(starts) - min(starts) < ALIGNED:
        return "left"
    if max(ends) - min(ends) < ALIGNED:
        return "right"
    return "center" if max(centres) - min(centres) < ALIGNED else "left"


def _justified(shown: list[list], starts: list[float], ends: list[float], right: float) -> bool:
    """Whether a paragraph's lines (`shown`: each line's items) are justified: its lines but
    its first start together (the first may be indented), all but its last end within
    ALIGNED of its box's `right` edge and its last no further; of two lines, only where the
    first line's spaces are widened by more than ALIGNED in all (`_widened`: a ragged
    paragraph's first line ends at its box's edge too)."""
    if len(starts) < 2 or max(starts[1:]) - min(starts[1:]) >= ALIGNED:
        return False
    if any(abs(end - right) >= ALIGNED for end in ends[:-1]) or ends[-1] >= right + ALIGNED:
        return False
    return len(starts) > 2 or _widened(shown[0], shown[-1]) > ALIGNED


def _widened(items: list, last: list) -> float:
    """How much wider a line's spaces are than unwidened, in all: as many times as it has
    gaps between words, the median of each gap less the space characters shown in it, or
    where it shows none (words parted by an offset), less the median gap between the words
    of the paragraph's `last` line (the median: a list's mark stands further from its
    text); 0 where that line, of one word, has none."""
    gaps, plain = _word_gaps(items), [gap for gap, _ in _word_gaps(last)]
    if not gaps or (any(not spaces for _, spaces in gaps) and not plain):
        return 0.0
    unwidened = statistics.median(plain) if plain else 0.0
    return len(gaps) * statistics.median(gap - (spaces or unwidened) for gap, spaces in gaps)


def _word_gaps(items: list) -> list[tuple[float, float]]:
    """The gaps between a line's words, from a word's last character to the next's first,
    each with the width of the space characters shown in it."""
    from pdfminer.layout import LTChar

    gaps: list[tuple[float, float]] = []
    end, spaced, spaces = None, False, 0.0
    for item in items:
        if not isinstance(item, LTChar) or item.get_text().isspace():
            spaced = end is not None
            spaces += item.width if isinstance(item, LTChar) else 0.0
            continue
        if spaced:
            gaps.append((item.x0 - end, spaces))
        end, spaced, spaces = item.x1, False, 0.0
    return gaps


def _redrawable(char) -> bool:
    a, b, c, d, _, _ = char.matrix
    shown = getattr(char, "shown", None)
    text = char.get_text()
    return (
        shown is not None
        and shown.redrawable
        and char.upright
        and abs(b) < 1e-6
        and abs(c) < 1e-6
        and a > 0
        and d > 0
        and not (text.startswith("(cid:") and len(text) > 1)
    )


def _joined(pieces: list[tuple[str, Style | None]]) -> list[tuple[str, Style | None]]:
    """A box's pieces as one text: each line break a space, a hyphen that ends a line
    before a lower-case letter left out (the word it cut joined again)."""
    joined: list[tuple[str, Style | None]] = []
    for number, (text, style) in enumerate(pieces):
        if text == "\n":
            after = next((t for t, _ in pieces[number + 1 :] if t.strip()), "")
            before = joined[-1][0] if joined else ""
            if before in HYPHENS and after[:1].islower():
                joined.pop()
                continue
            text = " "
        joined.append((text, style))
    return joined


def _runs(pieces: list[tuple[str, Style | None]]) -> tuple[list[str], list[Style]]:
    """Consecutive pieces of one style as a run (a space pdfminer put in takes the style
    of the text before it), the white space at either end left out."""
    runs: list[str] = []
    styles: list[Style] = []
    for text, style in pieces:
        style = style or (styles[-1] if styles else None)
        if style is None:  # white space before any character
            continue
        if styles and styles[-1] == style:
            runs[-1] += text
        else:
            runs.append(text)
            styles.append(style)
    if runs:
        runs[-1] = runs[-1].rstrip()
    kept = [(run, style) for run, style in zip(runs, styles, strict=True) if run]
    return [run for run, _ in kept], [style for _, style in kept]
