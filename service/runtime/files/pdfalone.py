"""A PDF paragraph of one line, whose lines cannot tell its alignment (`pdfparagraphs`
reads it as left-aligned), told centred or flush right from where it stands: in the
table's cell drawn around it (`_cell`), else in the text column above or under it
(`_columns`), the page's text, or the page itself (`_frames`); its box then made as wide
as its translation may be drawn so (`_aligned_alone`). Conservative: a line that starts
at its frame's left edge, or where a line above or under it starts, stays left-aligned,
as a wrong centre misplaces more than a lost one."""

from __future__ import annotations

from dataclasses import dataclass

from service.runtime.files.pdfdraw import Align, Box
from service.runtime.files.pdflines import ALIGNED, SHORT_LINE

ROOM_GAP = 2.0  # points between a translation reaching past its box and what is beside it
RULE = 2.0  # points: a drawing no wider than this is a ruling (a table's border)
# of a line's font size: how far right of its frame's left edge a line starts clear of it
# (a full line set in by a list's mark or a few points is not)
CLEAR = 1.0
CELL_PADDING = 1.0  # of a line's font size: the widest gap left by a cell's border to text at it
PAGE_MARGIN = 0.1  # of a page's width: what a line centred on the page alone leaves free
BODY_LINES = 2  # a box of fewer lines (a title, a label) tells no column


@dataclass(frozen=True)
class Frame:
    """What a line alone stands in: the edges it is centred or flush right between, the
    edges its translation may span, how far short of the right edge a line ends at it
    (`padding`), how far from the left edge a line starts clear of it (`clear`), and
    whether a line ending at its right edge is flush right (a page's own edges do not tell:
    its margin is not known)."""

    left: float
    right: float
    room: tuple[float, float]
    padding: float = ALIGNED
    clear: float = ALIGNED
    flush: bool = True


@dataclass(frozen=True)
class Line:
    """A text line of the page: its edges, its box's number and how many lines that box
    holds."""

    x0: float
    y0: float
    x1: float
    y1: float
    box: int
    count: int


@dataclass
class Page:
    """What a page's lines alone are told aligned by: the left and right edges of its text
    and of what a viewer shows of it, its text lines, and its drawings' edges (a table's
    borders among them)."""

    text: tuple[float, float]
    shown: tuple[float, float]
    lines: list[Line]
    rules: list[tuple[float, float, float, float]]


def _frames(box: Box, end: float, page: Page) -> list[Frame]:
    """The frames a line alone (its `box`, its text ending at `end`) is told aligned in,
    in the order they are asked: the table's cell drawn around it (`_cell`), alone where
    it is narrower than the page's text (a cell's line is told by its cell, not by the
    page the table stands in); the text columns above or under it (`_columns`); the page's
    text; the page as a viewer shows it (where the line is centred on it and starts further
    than SHORT_LINE of its width from its left edge: a cover's title)."""
    (left, right), clear = page.text, CLEAR * box.size
    cell = _cell(box, end, page.rules)
    framed = []
    if cell is not None:
        inside = (cell[0] + ROOM_GAP, cell[1] - ROOM_GAP)
        framed.append(Frame(cell[0], cell[1], inside, CELL_PADDING * box.size, clear))
        if cell[1] - cell[0] < right - left:
            return framed
    columns = _columns(box, end, page.lines)
    framed += [Frame(x0, x1, (x0, x1), clear=clear) for x0, x1 in columns]
    framed.append(Frame(left, right, (left, right), clear=clear))
    start, stop = page.shown
    margin = PAGE_MARGIN * (stop - start)
    room = (start + margin, stop - margin)
    framed.append(Frame(start, stop, room, clear=SHORT_LINE * (stop - start), flush=False))
    return framed


def _cell(box: Box, end: float, rules: list[tuple[float, float, float, float]]):
    """The left and right edges of the table's cell drawn around a line (its `box`, its
    text ending at `end`): the nearest border on either side of it that spans its height, a
    ruling (a line, a rectangle no wider than RULE) or a rectangle's side around it; None
    where either side has none, or where they leave no more than ROOM_GAP beside its text
    (a highlight drawn tight round it is no cell)."""
    lefts, rights = [], []
    for x0, y0, x1, y1 in rules:
        if y0 > box.y0 + ALIGNED or y1 < box.y1 - ALIGNED:
            continue
        if x1 - x0 <= RULE:
            middle = (x0 + x1) / 2
            if middle <= box.x0:
                lefts.append(middle)
            elif middle >= end:
                rights.append(middle)
        elif x0 <= box.x0 and x1 >= end:
            lefts.append(x0)
            rights.append(x1)
    if not lefts or not rights:
        return None
    cell = max(lefts), min(rights)
    return cell if box.x0 - cell[0] > ROOM_GAP and cell[1] - end > ROOM_GAP else None


def _columns(box: Box, end: float, lines: list[Line]) -> list[tuple[float, float]]:
    """The left and right edges of the text columns a line alone (its `box`, its text
    ending at `end`) may stand in: those of the lines above or under it and overlapping it
    across, of boxes of BODY_LINES or more (a title, a label tells no column) and not of its
    own extent (a column of cells alike tells only their width): all of them, those of the
    nearest such box under it, and those of the nearest above (a column's heading under
    text across the page)."""
    column = [
        line
        for line in lines
        if line.count >= BODY_LINES
        and (line.y0 >= box.y1 or line.y1 <= box.y0)
        and (abs(line.x0 - box.x0) >= ALIGNED or abs(line.x1 - end) >= ALIGNED)
        and line.x0 < end
        and line.x1 > box.x0
    ]
    if not column:
        return []
    under = [line for line in column if line.y1 <= box.y0]
    above = [line for line in column if line.y0 >= box.y1]
    nearest = [max(under, key=lambda line: line.y1)] if under else []
    nearest += [min(above, key=lambda line: line.y0)] if above else []
    found = [column] + [[line for line in column if line.box == near.box] for near in nearest]
    edges = [(min(line.x0 for line in held), max(line.x1 for line in held)) for held in found]
    return list(dict.fromkeys(edges))


def _aligned_alone(box: Box, end: float, reach: tuple[float, float], page: Page) -> None:
    """A paragraph of one line (of a left alignment, as its lines cannot tell another), its
    text ending at `end`, told centred or flush right by the first of its frames on the
    `page` that tells it so (`_frames`, `_told`), unless it is code (monospaced: set by
    its spaces) or starts where a line above or under it starts and ends elsewhere (a
    column's or an indent's edge; a line of its width, a cell of a column centred or flush
    right, tells nothing). Centred, its box is as wide on either side of its centre
    as the frame's room and what is beside it allow (`reach`: the left and right edges it
    may span); flush right, it ends where its text (`end`) ends and reaches left as far.
    Its translation keeps that centre or that right edge, and runs no further right."""
    if box.baseline != box.last or box.align != "left":
        return
    if all(style.family == "mono" for style in box.styles):
        return
    if any(
        abs(line.x0 - box.x0) < ALIGNED and abs(line.x1 - end) >= ALIGNED
        for line in page.lines
        if line.y0 >= box.y1 or line.y1 <= box.y0
    ):
        return
    for frame in _frames(box, end, page):
        align = _told(box.x0, end, frame)
        left, right = max(frame.room[0], reach[0]), min(frame.room[1], reach[1])
        centre = (box.x0 + end) / 2
        if align == "center":
            half = max(end - centre, min(centre - left, right - centre))
            box.x0, box.x1 = centre - half, centre + half
        elif align == "right":
            box.x0, box.x1 = min(box.x0, left), end
        else:
            continue
        box.align, box.room = align, box.x1
        return


def _told(start: float, end: float, frame: Frame) -> Align:
    """How a line from `start` to `end` stands in `frame`: "center" where it starts clear
    of the frame's left edge and its centre is within ALIGNED of the frame's; "right"
    where it ends within the frame's padding short of its right edge (or ALIGNED past it)
    and starts further than SHORT_LINE of the frame's width from its left; else "left"."""
    if start - frame.left <= frame.clear:
        return "left"
    if abs((start + end) / 2 - (frame.left + frame.right) / 2) < ALIGNED:
        return "center"
    if (
        frame.flush
        and -ALIGNED < frame.right - end < frame.padding
        and start - frame.left > SHORT_LINE * (frame.right - frame.left)
    ):
        return "right"
    return "left"
