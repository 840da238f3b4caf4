"""A translated text box of a PDF page drawn where its source was (reportlab): from its left
edge and its first line's baseline, wrapped to its width (a justified box's lines but the
last widened to it), in the size of its text, made smaller (to MIN_SCALE of it, and no
less than MIN_POINTS) where the translation needs more lines than the box has height;
each word in its run's style (the standard fonts' family, bold and italic as the source's
font names say, its colour)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

MIN_SCALE = 0.6  # of a box's font size, the least a translation that does not fit is drawn in
MIN_POINTS = 5.0  # the least font size a translation is drawn in, where its source's was more
SCALE_STEP = 0.05  # the font size made smaller by this part of it at a time
# where a translation holds what the standard fonts cannot draw (outside Windows-1252): the
# first of these TrueType fonts the machine has is embedded for it
FALLBACK_FONTS = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
)
FALLBACK_NAME = "attnserve-fallback"
# the standard fonts by family, bold, italic
STANDARD = {
    "sans": ("Helvetica", "Helvetica-Bold", "Helvetica-Oblique", "Helvetica-BoldOblique"),
    "serif": ("Times-Roman", "Times-Bold", "Times-Italic", "Times-BoldItalic"),
    "mono": ("Courier", "Courier-Bold", "Courier-Oblique", "Courier-BoldOblique"),
}
# what fonts' names say of their family, weight and slant (TeX's Computer Modern by its codes:
# CMR roman, CMSS sans, CMTT, CMSLTT, CMITT and CMTCSC typewriter, CMBX bold, CMTI, CMITT,
# CMMI and CMSL slanted)
MONO = re.compile(r"courier|mono|nimbusmon|consol|code|^CM(SL|I)?TT|^CMTCSC", re.I)
SANS = re.compile(r"sans|helvetica|arial|verdana|calibri|tahoma|^CMSS", re.I)
SERIF = re.compile(
    r"times|serif|roman|nimbusrom|georgia|garamond|cambria|minion|palatino|^CM", re.I
)
BOLD = re.compile(r"bold|black|heavy|demi|medi|^CMBX|^CMB\d", re.I)
ITALIC = re.compile(r"ital|oblique|^CMTI|^CMITT|^CMMI|^CMSL", re.I)
SUBSET = re.compile(r"^[A-Z]{6}\+")  # a subset font's tag before its name
# what no font draws: control characters (a model's byte pieces can give them), surrogates
UNDRAWN = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class Style:
    """How a run's text is drawn: a standard font's family, bold, italic, and a fill colour
    (1 component: gray, 3: RGB, 4: CMYK; none: black)."""

    family: str = "sans"
    bold: bool = False
    italic: bool = False
    colour: tuple[float, ...] = ()

    @classmethod
    def of(cls, fontname: str, colour: tuple[float, ...]) -> Style:
        """The style of a character of font `fontname` (`ABCDEF+Arial-BoldMT` is Helvetica
        bold) filled with `colour`; the family is serif or monospaced where the name says
        so (`Times`, `Georgia`; `Courier`, `Mono`), else Helvetica's."""
        name = SUBSET.sub("", fontname)
        family = "sans"
        if MONO.search(name):
            family = "mono"
        elif SERIF.search(name) and not SANS.search(name):
            family = "serif"
        return cls(family, bool(BOLD.search(name)), bool(ITALIC.search(name)), colour)

    def font(self, text: str) -> str:
        """The font `text` is drawn in: the standard one, or the TrueType fallback where
        `text` holds what it cannot draw and the machine has one."""
        if not _standard(text) and _fallback():
            return FALLBACK_NAME
        return STANDARD[self.family][self.bold + 2 * self.italic]


# where a box's lines meet its edges: its left, its right, its centre, or both edges (but
# for its last line)
Align = Literal["left", "right", "center", "justify"]


@dataclass
class Box:
    """A text box of a page, in pdfminer's coordinates of its page (points, y upwards):
    its edges, its first and last lines' baselines, its text's font size and line pitch,
    each run's style, and the translation's segments (run, text) once written."""

    x0: float
    y0: float
    x1: float
    y1: float
    baseline: float
    last: float
    size: float
    leading: float
    styles: list[Style]
    indent: float = 0.0  # of the first line, from x0 (less than 0: a hanging indent)
    align: Align = "left"  # where the lines meet the box's edges
    room: float = 0.0  # the right edge a translation may reach where the box's is too near
    placed: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Layout:
    """A translation laid out in its box: its font size, its right edge, and each line's
    words, a word its pieces (text, style) drawn without a space between them."""

    size: float
    right: float
    lines: list[list[list[tuple[str, Style]]]]
    scale: float  # the size over the box's


def laid_out(box: Box) -> Layout:
    """The translation in the box at the largest size (its text's, made smaller a step at a
    time, to the least allowed) whose lines fit the box's height (the space above the first
    baseline and below the last scaled with it) and its width (a word longer than a line),
    wrapped to the box's width, or where that does not fit at the box's size, to its room;
    at the least size, however many lines."""
    words = _words(box)
    least = min(1.0, max(MIN_SCALE, MIN_POINTS / box.size)) if box.size > 0 else 1.0
    above, below = box.y1 - box.baseline, box.last - box.y0
    scale, right = 1.0, box.x1
    while True:
        size = box.size * scale
        lines = _wrapped(words, right - box.x0, size, box.indent)
        height = scale * (above + (len(lines) - 1) * box.leading + below)
        wide = max(_wide(line, size) + (0 if n else box.indent) for n, line in enumerate(lines))
        fits = height <= (box.y1 - box.y0) * 1.001 and wide <= (right - box.x0) * 1.001
        if not fits and scale == 1.0 and right < box.room:
            right = box.room  # wider rather than smaller
            continue
        if fits or scale - SCALE_STEP < least - 1e-9:
            return Layout(size, right, lines, scale)
        scale -= SCALE_STEP


def draw(canvas, box: Box) -> None:
    """`box`'s translation drawn on a reportlab `canvas` in pdfminer's coordinates."""
    layout = laid_out(box)
    baseline = box.y1 - (box.y1 - box.baseline) * layout.scale
    for number, line in enumerate(layout.lines):
        start = _start(box, layout, line, number)
        text = canvas.beginText(start, baseline)
        if box.align == "justify":  # its last line too: the word spacing stays set after it
            text.setWordSpace(_word_space(layout, line, start, number))
        for count, word in enumerate(line):
            for index, (piece, style) in enumerate(word):
                text.setFont(style.font(piece), layout.size)
                _fill(text, style.colour)
                text.textOut((" " if count and not index else "") + piece)
        canvas.drawText(text)
        baseline -= box.leading * layout.scale


def _start(box: Box, layout: Layout, line, number: int) -> float:
    """Where a line of the layout starts: the box's left edge (the first line indented),
    or as far from it as its alignment puts it."""
    if box.align in ("left", "justify"):
        return box.x0 + (0 if number else box.indent)
    free = max(0.0, box.x1 - box.x0 - _wide(line, layout.size))
    return box.x0 + (free if box.align == "right" else free / 2)


def _word_space(layout: Layout, line, start: float, number: int) -> float:
    """What a justified line's spaces are widened by (`Tw`) to end at the layout's right
    edge: 0 for its last line and a line of one word."""
    if number == len(layout.lines) - 1 or len(line) < 2:
        return 0.0
    return max(0.0, (layout.right - start - _wide(line, layout.size)) / (len(line) - 1))


def _wide(line, size: float) -> float:
    """A laid out line's width at `size`: its words and the spaces between them."""
    wide = sum(_width(piece, style, size) for word in line for piece, style in word)
    return wide + sum(_width(" ", word[0][1], size) for word in line[1:])


def _words(box: Box) -> list[list[tuple[str, Style]]]:
    """The translation's words, each its pieces of one run: text after white space starts
    a word, text right after another run's is a piece of the same word."""
    words: list[list[tuple[str, Style]]] = []
    for run, text in box.placed:
        style = box.styles[run] if 0 <= run < len(box.styles) else Style()
        for spaced in re.finditer(r"(\s*)(\S+)", UNDRAWN.sub("", text)):
            if spaced.group(1) or not words:
                words.append([])
            words[-1].append((spaced.group(2), style))
    return words


def _wrapped(words, width: float, size: float, indent: float = 0.0):
    """`words` in lines of at most `width` points at `size`, the first `indent` less (a
    longer word a line alone)."""
    lines: list[list[list[tuple[str, Style]]]] = [[]]
    used = indent
    for word in words:
        wide = sum(_width(piece, style, size) for piece, style in word)
        space = _width(" ", word[0][1], size) if lines[-1] else 0.0
        if lines[-1] and used + space + wide > width * 1.001:
            lines.append([])
            used, space = 0.0, 0.0
        lines[-1].append(word)
        used += space + wide
    return lines


def _width(text: str, style: Style, size: float) -> float:
    from reportlab.pdfbase.pdfmetrics import stringWidth

    return stringWidth(text, style.font(text), size)


def _fill(text, colour: tuple[float, ...]) -> None:
    if len(colour) == 1:
        text.setFillGray(colour[0])
    elif len(colour) == 3:
        text.setFillColorRGB(*colour)
    elif len(colour) == 4:
        text.setFillColorCMYK(*colour)
    else:
        text.setFillGray(0)


def _standard(text: str) -> bool:
    """Whether the standard fonts draw `text` (their encoding is Windows-1252's)."""
    try:
        text.encode("cp1252")
    except UnicodeEncodeError:
        return False
    return True


@functools.cache
def _fallback() -> bool:
    """Whether a TrueType font of FALLBACK_FONTS is registered with reportlab as
    FALLBACK_NAME (the first the machine has)."""
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    for path in FALLBACK_FONTS:
        if Path(path).is_file():
            pdfmetrics.registerFont(TTFont(FALLBACK_NAME, path))
            return True
    return False
