"""A PDF's text as its content streams show it: pdfminer.six reads every character with the
operator that showed it (`Shown`: the stream, the operator's number among the stream's
text-showing operators), so that the text of the boxes translated is taken out of exactly
the streams and operators that drew it (`taken_out`, with pypdf), and nothing else is."""

from __future__ import annotations

import io
from collections import defaultdict
from dataclasses import dataclass, field

# the text-showing operators; `'` and `"` move to the next line first (and `"` sets the
# word and character spacing), which stays when their text goes
SHOWS = (b"Tj", b"TJ", b"'", b'"')
VISIBLE_MODES = (0, 1, 2)  # text rendering modes that draw glyphs (3: invisible; 4-7 clip)
WORD_MARGIN = 0.1  # of a character's size: a wider gap before it is a space to the layout

Where = tuple[str, int]  # ("page", its index) or ("form", a form XObject's object number)


@dataclass(frozen=True)
class Shown:
    """A text-showing operator as it ran: where, its number among the text-showing
    operators of its stream, whether its glyphs can be drawn again in a standard font (a
    horizontal font that is not Type3, a visible rendering mode), its advance in the
    units of a TJ array's numbers (None: a font size of 0), and its character spacing
    (`Tc`, horizontally scaled) in text space units."""

    where: Where
    number: int
    redrawable: bool
    advance: float | None
    spacing: float = 0.0


@dataclass
class Reading:
    """What the interpreter records over a whole document: each page's matrix from user
    space to pdfminer's coordinates, and how many text-showing operators each stream
    ran (a stream whose every run ran the same count, as pypdf parses it, can be edited)."""

    page_matrices: list[tuple[float, ...]] = field(default_factory=list)
    counts: dict[Where, set[int]] = field(default_factory=lambda: defaultdict(set))
    entering: Where = ("page", 0)


def read_pages(data: bytes, pages: int):
    """pdfminer's layout of each of the first `pages` pages of `data` (its LTPage), every
    LTChar with `shown` (the Shown that drew it), and the Reading."""
    from pdfminer.converter import PDFPageAggregator
    from pdfminer.layout import LAParams
    from pdfminer.pdfinterp import PDFResourceManager
    from pdfminer.pdfpage import PDFPage

    manager, reading = PDFResourceManager(caching=True), Reading()
    device = PDFPageAggregator(manager, laparams=LAParams(all_texts=True, word_margin=WORD_MARGIN))
    interpreter = _recorder()(manager, device)
    interpreter.reading = reading
    laid = []
    for index, page in enumerate(PDFPage.get_pages(io.BytesIO(data), maxpages=pages)):
        reading.entering = ("page", index)
        interpreter.process_page(page)
        laid.append(device.get_result())
    return laid, reading


def _recorder():
    """pdfminer's page interpreter that tags each character with the operator showing it."""
    from pdfminer.pdffont import PDFType3Font
    from pdfminer.pdfinterp import PDFPageInterpreter
    from pdfminer.pdftypes import stream_value
    from pdfminer.psparser import literal_name

    class Recorder(PDFPageInterpreter):
        reading: Reading
        where: Where = ("page", 0)
        shown = 0  # text-showing operators run so far in this stream
        showing = False  # inside one (Tj, ' and " show by TJ)
        advance = 0.0

        def dup(self):
            sub = super().dup()
            sub.reading = self.reading
            return sub

        def render_contents(self, resources, streams, ctm=(1, 0, 0, 1, 0, 0)):
            self.where, self.shown = self.reading.entering, 0
            if self.where[0] == "page" and len(self.reading.page_matrices) == self.where[1]:
                self.reading.page_matrices.append(tuple(ctm))
            super().render_contents(resources, streams, ctm)
            self.reading.counts[self.where].add(self.shown)

        def do_Do(self, xobjid_arg):
            reference = self.xobjmap.get(literal_name(xobjid_arg))
            objid = getattr(stream_value(reference), "objid", None) if reference else None
            self.reading.entering = ("form", objid if objid is not None else -1)
            super().do_Do(xobjid_arg)

        def do_TJ(self, seq):
            self._show(self._shown_tj, seq)

        def do_Tj(self, s):
            self._show(super().do_Tj, s)

        def do__q(self, s):
            self._show(super().do__q, s)

        def do__w(self, aw, ac, s):
            self._show(super().do__w, aw, ac, s)

        def _shown_tj(self, seq):
            start = self.textstate.linematrix[0]
            PDFPageInterpreter.do_TJ(self, seq)
            self.advance = self.textstate.linematrix[0] - start

        def _show(self, call, *args) -> None:
            if self.showing:  # Tj, ' and " show through TJ: one operator
                call(*args)
                return
            state, held = self.textstate, self.device.cur_item._objs
            before, self.advance, self.showing = len(held), 0.0, True
            try:
                call(*args)
            finally:
                self.showing = False
            font, scale = state.font, 0.001 * state.fontsize * state.scaling * 0.01
            redrawable = (
                font is not None
                and not isinstance(font, PDFType3Font)
                and not font.is_vertical()
                and state.render in VISIBLE_MODES
            )
            advance = -self.advance / scale if scale else None
            spacing = state.charspace * state.scaling * 0.01
            shown = Shown(self.where, self.shown, redrawable, advance, spacing)
            self.shown += 1
            for item in held[before:]:
                item.shown = shown

    return Recorder


def editable(writer, reading: Reading) -> set[Where]:
    """The streams whose every run showed as many text operators as pypdf parses in them
    (a pypdf `writer`'s objects numbered as pdfminer read them): their operators are known
    by number."""
    kept = set()
    for where, counts in reading.counts.items():
        content = _content(writer, where)
        if len(counts) == 1 and content is not None and shows(content) in counts:
            kept.add(where)
    return kept


def taken_out(writer, removed: dict[Where, dict[int, float | None]]) -> None:
    """The text operators of each stream numbered in `removed` taken out (`unshown`), in
    a pypdf `writer`'s pages and form XObjects."""
    for where, numbers in removed.items():
        content = _content(writer, where)
        content.operations = unshown(content, numbers)
        if where[0] == "page":
            writer.pages[where[1]].replace_contents(content)
        else:
            _set_data(writer.get_object(where[1]), content.get_data())


def _content(writer, where: Where):
    """The ContentStream of a page or a form XObject; None for a form pdfminer found
    without an object number, or whose number holds no stream."""
    from pypdf.generic import ContentStream, StreamObject

    kind, number = where
    if kind == "page":
        return writer.pages[number].get_contents()
    stream = writer.get_object(number) if number > 0 else None
    return ContentStream(stream, writer) if isinstance(stream, StreamObject) else None


def _set_data(stream, data: bytes) -> None:
    """A form XObject's content made `data`, compressed (pypdf writes Flate alone)."""
    from pypdf.generic import NameObject

    if "/Filter" in stream:
        stream.get_data()  # its decoded copy, which set_data replaces
        stream[NameObject("/Filter")] = NameObject("/FlateDecode")
        stream.pop("/DecodeParms", None)
    stream.set_data(data)


def unshown(content, removed: dict[int, float | None]):
    """A pypdf ContentStream's operations with the text-showing operators numbered in
    `removed` taken out: each replaced by a TJ of its advance alone, so that text the same
    line shows after it stays where it was (`'` and `"` keep their move to the next line
    and their spacing)."""
    operations, number = [], 0
    for operands, operator in content.operations:
        if operator not in SHOWS:
            operations.append((operands, operator))
            continue
        if number in removed:
            operations += _without_text(operands, operator, removed[number])
        else:
            operations.append((operands, operator))
        number += 1
    return operations


def shows(content) -> int:
    """How many text-showing operators a pypdf ContentStream holds."""
    return sum(operator in SHOWS for _, operator in content.operations)


def _without_text(operands, operator: bytes, advance: float | None):
    from pypdf.generic import ArrayObject, FloatObject

    kept = []
    if operator == b'"' and len(operands) == 3:
        kept += [([operands[0]], b"Tw"), ([operands[1]], b"Tc")]
    if operator in (b"'", b'"'):
        kept.append(([], b"T*"))
    if advance:
        kept.append(([ArrayObject([FloatObject(round(advance, 3))])], b"TJ"))
    return kept
