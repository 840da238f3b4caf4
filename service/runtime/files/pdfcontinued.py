"""A page's paragraphs (`Lines`) that continue the paragraph before them, though the layout
analysis boxes them apart from it, taken back into it (`_continued`): a list item's lines
under its text, boxed apart from its first line, which starts at its mark (`_continues`),
and running text's lines under a paragraph's first line, boxed apart from it where that
line is indented (`_flows_on`)."""

from __future__ import annotations

import statistics

from service.runtime.files.pdflines import (
    ALIGNED,
    LIST_MARK,
    SHORT_LINE,
    SIZE_STEP,
    Lines,
    _baseline,
    _family,
    _leading,
    _monospaced,
    _size,
    _sized_apart,
)

# of a line's leading: how far a box's first line may be from one leading under the last
# line of the paragraph before and be the rest of it
LEADING_SLACK = 0.15
INDENT = 4.0  # of a line's size: the widest first line's indent
SAME_SIZE = 1.02  # lines whose sizes differ by more than this ratio are not one text running on


def _continued(groups: list[Lines]) -> list[Lines]:
    """A page's `groups` in their order, the first paragraph of a box taken into the
    paragraph before where it continues that list item (`_continues`) or that paragraph's
    running text (`_flows_on`)."""
    page = Around(groups)
    merged: list[Lines] = []
    for group in groups:
        before = merged[-1] if merged else None
        if (
            before is not None
            and group.first
            and (_continues(group, before, page) or _flows_on(group, before, page))
        ):
            merged[-1] = Lines(
                before.lines + group.lines,
                max(before.right, group.right),
                before.prefix,
                before.first,
                before.kept or group.kept,
            )
        else:
            merged.append(group)
    return merged


class Around:
    """What a page's paragraphs (`groups`) tell of one: the pitch of its lines of a size
    (the median of its paragraphs' of that size), the lines on a baseline, and the lines
    that start at a left edge."""

    def __init__(self, groups: list[Lines]) -> None:
        pitches: dict[float, list[float]] = {}
        self.rows: dict[int, list] = {}
        self.lines = [line for group in groups for line in group.lines]
        for group in groups:
            if len(group.lines) > 1:
                pitches.setdefault(_size(group.lines[-1]), []).append(_leading(group.lines))
            for line in group.lines:
                self.rows.setdefault(round(_baseline(line)), []).append(line)
        self.pitches = {size: statistics.median(found) for size, found in pitches.items()}

    def pitch(self, size: float) -> float:
        """The leading of lines of `size` (within SIZE_STEP) on the page, the nearest
        size's; where there are none, 1.2 times the size."""
        near = [s for s in self.pitches if max(s, size) <= SIZE_STEP * min(s, size)]
        return self.pitches[min(near, key=lambda s: abs(s - size))] if near else 1.2 * size

    def on(self, baseline: float) -> list:
        """The lines whose baseline is within ALIGNED of `baseline`."""
        row = round(baseline)
        near = [line for key in (row - 1, row, row + 1) for line in self.rows.get(key, [])]
        return [line for line in near if abs(_baseline(line) - baseline) < ALIGNED]

    def between(self, top: float, bottom: float) -> list:
        """The lines whose baseline is below `top` and above `bottom`, by more than ALIGNED."""
        return [
            line
            for row, lines in self.rows.items()
            if bottom - 2 < row < top + 2
            for line in lines
            if bottom + ALIGNED < _baseline(line) < top - ALIGNED
        ]

    def right(self, left: float, indent: float) -> float:
        """The right edge of the column whose lines start at `left`, or at its first
        lines' `indent`: the furthest the lines that start there or between (within
        ALIGNED) reach."""
        start, end = min(left, indent) - ALIGNED, max(left, indent) + ALIGNED
        return max(line.x1 for line in self.lines if start <= line.x0 <= end)


def _continues(group: Lines, item: Lines, page: Around) -> bool:
    """Whether `group` is the rest of list item `item`: it starts under the item's text
    (within ALIGNED of where its text starts after its mark), a line's leading below its
    last line (`_a_leading_under`), which does not end short (SHORT_LINE of their width),
    at its size, not code, with no mark of its own (nor one boxed apart on its left, within
    the item's width)."""
    line, last = group.lines[0], item.lines[-1]
    start = _text_start(item)
    if start is None or abs(line.x0 - start) > ALIGNED or group.prefix:
        return False
    if LIST_MARK.match(line.get_text()) or _monospaced(line) or _sized_apart(line, last):
        return False
    right = max(item.right, group.right)
    if last.x1 < right - SHORT_LINE * (right - item.lines[0].x0):
        return False  # the item's last line ends short: its last
    if not _a_leading_under(group, item, page):
        return False
    left = item.lines[0].x0 - ALIGNED
    return not any(left <= o.x0 and o.x1 <= line.x0 for o in page.on(_baseline(line)))


def _flows_on(group: Lines, above: Lines, page: Around) -> bool:
    """Whether `group` is the rest of paragraph `above`, running text (not a list item:
    `_continues`): it starts where the lines of `above` after its first start, or, where
    `above` is one line, at its left or left of it by no more than a first line's indent
    (INDENT); a line's leading below its last line (`_a_leading_under`), which reaches the
    right edge of their column (within SHORT_LINE of its width; `Around.right`), with no
    line between them; at its size (within SAME_SIZE) and in its font family, neither code,
    with no mark of its own."""
    line, last = group.lines[0], above.lines[-1]
    if group.prefix or above.prefix or _text_start(above) is not None:
        return False
    if LIST_MARK.match(line.get_text()) or _monospaced(line) or _monospaced(last):
        return False
    if _sized_apart(line, last, SAME_SIZE) or _family(line) != _family(last):
        return False
    if len(above.lines) > 1:
        if abs(line.x0 - above.lines[1].x0) > ALIGNED:
            return False
    elif not -ALIGNED <= above.lines[0].x0 - line.x0 <= INDENT * _size(line):
        return False
    right = max(page.right(line.x0, above.lines[0].x0), above.right)
    if last.x1 < right - SHORT_LINE * (right - line.x0):
        return False  # the paragraph's last line ends short: its last
    if not _a_leading_under(group, above, page):
        return False
    return not page.between(_baseline(last), _baseline(line))


def _a_leading_under(group: Lines, before: Lines, page: Around) -> bool:
    """Whether `group`'s first line is one line's leading under the last line of `before`
    (within LEADING_SLACK of it): the pitch of the lines of either, or where neither has
    two, the page's for their size (`Around.pitch`)."""
    line, last = group.lines[0], before.lines[-1]
    leading = _leading(before.lines) or _leading(group.lines) or page.pitch(_size(last))
    return abs(_baseline(last) - _baseline(line) - leading) <= LEADING_SLACK * leading


def _text_start(group: Lines) -> float | None:
    """Where a list item's text starts on its first line, after its mark (its kept prefix,
    or a LIST_MARK) and the space after it; None for a paragraph that is not a list item."""
    from pdfminer.layout import LTChar

    items = list(group.lines[0])[group.prefix :]
    if not group.prefix:
        mark = LIST_MARK.match(group.lines[0].get_text())
        if mark is None:
            return None
        taken = 0
        while items and taken < mark.end():
            taken += len(items.pop(0).get_text())
    return next((i.x0 for i in items if isinstance(i, LTChar) and not i.get_text().isspace()), None)
