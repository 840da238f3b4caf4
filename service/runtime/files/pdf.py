"""PDF documents (.pdf; pdfminer.six reads the text and its layout, pypdf edits the file,
reportlab draws the translations: the three are in the serve extra). Each text box of a
page, as pdfminer's layout analysis groups its lines, is a paragraph whose runs are its
spans of one style (font family, bold, italic, colour); its text is taken out of the
content streams that showed it (the page's, a form XObject's: pdftext) and its translation
drawn in the box (pdfdraw). The pages' size, order, images, drawings, annotations, links
and forms stay. Kept as they were, not translated: rotated and vertical text, text in Type3
fonts, invisible text (a scan's recognised layer), text whose characters the file does not
map to Unicode, a paragraph holding or overlapped by such text, and a box sharing a
text-showing operator with such text; such characters before a paragraph's first that can
be drawn again, parted from it by a space (a list's mark), stay and the paragraph after
them is translated. A file without a box to translate (a scan) comes back as it was."""

from __future__ import annotations

import functools
import io
import itertools
import math

from service.runtime.files.archive import _not_a
from service.runtime.files.labels import Relabel
from service.runtime.files.model import File, Paragraph
from service.runtime.files.pdfalone import ROOM_GAP, Line, Page, _aligned_alone
from service.runtime.files.pdfdraw import Box, draw
from service.runtime.files.pdfparagraphs import Read, _boxes
from service.runtime.files.pdftext import (
    Reading,
    Where,
    editable,
    read_pages,
    taken_out,
)

PDF_PAGES = 1_000  # pages of a .pdf at most
# what a .pdf's pages draw (content streams, forms, fonts' programs and maps), decoded, at most
PDF_DECODED_BYTES = 256 << 20


def _pdf(data: bytes, suffix: str) -> File:
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=_opened(data, suffix))
    _bounded(writer, suffix)
    numbered = io.BytesIO()  # objects numbered as the writer numbers them, for pdfminer
    writer.write(numbered)
    laid, reading = read_pages(numbered.getvalue(), len(writer.pages))
    boxes = [read for index, page in enumerate(laid) for read in _boxes(page, index)]
    boxes = _translatable(boxes, laid, editable(writer, reading))
    paged = _by_page(boxes, len(laid))
    for index, page in enumerate(laid):
        shown = _shown(writer.pages[index], reading.page_matrices[index], page)
        _give_room(paged[index], page, shown)
    if not boxes:
        return File([], "plain", lambda: data)
    paragraphs = [Paragraph(read.runs, _writer_of(read.box)) for read in boxes]

    @functools.cache
    def save() -> bytes:
        return _saved(writer, boxes, reading)

    def relabel(wanted: Relabel) -> None:
        """The catalog's `/Lang`, the document's language."""
        from pypdf.generic import NameObject, TextStringObject

        value = wanted.value(str(writer.root_object.get("/Lang", "")))
        if value is not None:
            writer.root_object[NameObject("/Lang")] = TextStringObject(value)

    return File(paragraphs, "plain", save, relabel=relabel)


def _opened(data: bytes, suffix: str):
    """`data` as a pypdf reader; ValueError where it is not a PDF, is encrypted or has more
    than PDF_PAGES pages."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ValueError(f"{suffix}: encrypted (protected by a password); send it decrypted")
        pages = len(reader.pages)
    except (PyPdfError, OSError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(_not_a(suffix, error)) from None
    if pages > PDF_PAGES:
        raise ValueError(f"{suffix}: more than {PDF_PAGES} pages")
    return reader


def _bounded(writer, suffix: str) -> None:
    """ValueError where what the pages draw (their content, their forms, their fonts'
    programs and maps) decodes to more than PDF_DECODED_BYTES (pypdf decodes each stream
    to at most its own limit): pdfminer decodes them without one."""
    from pypdf.errors import PyPdfError
    from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, StreamObject

    seen: set[int] = set()
    total = 0

    def walk(value) -> None:
        nonlocal total
        if isinstance(value, IndirectObject):
            if value.idnum in seen:
                return
            seen.add(value.idnum)
            value = value.get_object()
        if isinstance(value, StreamObject) and value.get("/Subtype") != "/Image":
            total += len(value.get_data())
            if total > PDF_DECODED_BYTES:
                raise ValueError(f"{suffix}: more than {PDF_DECODED_BYTES >> 20} MiB decoded")
        if isinstance(value, DictionaryObject):
            for key, held in value.items():
                if key not in ("/Parent", "/Annots", "/Thumb", "/B"):
                    walk(held)
        elif isinstance(value, ArrayObject):
            for held in value:
                walk(held)

    try:
        for page in writer.pages:
            walk(page.get("/Contents"))
            walk(page.get("/Resources"))
    except PyPdfError as error:
        raise ValueError(_not_a(suffix, error)) from None


def _shown(page, matrix: tuple[float, ...], laid) -> tuple[float, float]:
    """The left and right edges of what a viewer shows of a pypdf `page` (its crop box
    within its media box, pdfminer's `laid` page), in pdfminer's coordinates (`matrix`)."""
    a, _, c, _, e, _ = matrix
    box = page.cropbox
    xs = [a * x + c * y + e for x in (box.left, box.right) for y in (box.bottom, box.top)]
    return max(laid.x0, float(min(xs))), min(laid.x1, float(max(xs)))


def _give_room(reads: list[Read], page, shown: tuple[float, float]) -> None:
    """Each box's right edge kept left of the nearest thing beside its text on the right
    (a line of text, of its layout box too: a table's next column; a picture, a drawing),
    though never left of its text; and its room: the right edge its translation may reach,
    where it needs more width than the box's (a heading, a label): that thing's left edge,
    else the right edge of the page's text (its right margin, from the `shown` edges of the
    page, taken as wide as its left); a paragraph of one line centred or flush right in
    its cell, its column, the page's text or the page drawn so (pdfalone)."""
    from pdfminer.layout import LTComponent, LTCurve, LTFigure, LTTextBox

    start, end = shown
    left = min((read.box.x0 for read in reads), default=start)
    beside, right = [], max([read.box.x1 for read in reads] + [end - (left - start)])
    lines: list[Line] = []  # the page's text lines, each with its box's number and size
    rules: list[tuple[float, float, float, float]] = []  # its drawings: a table's borders
    numbers = itertools.count()

    def walk(container) -> None:
        nonlocal right
        for item in container:
            if isinstance(item, LTTextBox):
                held, number = list(item), next(numbers)
                beside.extend(line.bbox for line in held)
                lines.extend(Line(*line.bbox, number, len(held)) for line in held)
                right = max(right, item.x1)
            elif isinstance(item, LTComponent):
                beside.append(item.bbox)
            if isinstance(item, LTCurve):
                rules.append(item.bbox)
            if isinstance(item, LTFigure):
                walk(item)

    walk(page)
    told = Page((left, right), shown, lines, rules)
    for read in reads:
        box, text = read.box, max(char.x1 for char in read.chars)
        level = [(x0, x1) for x0, y0, x1, y1 in beside if y0 < box.y1 and y1 > box.y0]
        edges = [x0 for x0, _ in level if x0 >= text - 0.5]
        if edges:
            box.x1 = max(text, min(box.x1, min(edges) - ROOM_GAP))
        box.room = max(box.x1, min(edges, default=right) - ROOM_GAP)
        before = max((x1 for _, x1 in level if x1 <= box.x0 + 0.5), default=-math.inf)
        reach = (before + ROOM_GAP, min(edges, default=math.inf) - ROOM_GAP)
        _aligned_alone(box, text, reach, told)


def _writer_of(box: Box):
    def write(placed: list[tuple[int, str]]) -> None:
        box.placed = placed

    return write


def _translatable(boxes: list[Read], laid, editable: set[Where]) -> list[Read]:
    """The boxes whose text can go: every operator showing one of their characters shows
    characters of such boxes alone, in a stream that can be edited."""
    shown: dict[tuple[Where, int], list] = {}
    for char in _characters(laid):
        if getattr(char, "shown", None) is not None:
            shown.setdefault((char.shown.where, char.shown.number), []).append(char)
    chosen = set(range(len(boxes)))
    for number, read in enumerate(boxes):
        for char in read.chars:
            char.box = number
    while True:
        removable = {
            key
            for key, chars in shown.items()
            if key[0] in editable and all(getattr(c, "box", None) in chosen for c in chars)
        }
        dropped = {
            number
            for number in chosen
            if any((c.shown.where, c.shown.number) not in removable for c in boxes[number].chars)
        }
        if not dropped:
            return [read for number, read in enumerate(boxes) if number in chosen]
        chosen -= dropped


def _characters(laid):
    from pdfminer.layout import LTChar, LTContainer

    def walk(container):
        for item in container:
            if isinstance(item, LTChar):
                yield item
            elif isinstance(item, LTContainer):
                yield from walk(item)

    for page in laid:
        yield from walk(page)


def _by_page(boxes: list[Read], pages: int) -> list[list[Read]]:
    """`boxes` by the index of their page, in their order (one pass, whatever the pages)."""
    paged: list[list[Read]] = [[] for _ in range(pages)]
    for read in boxes:
        paged[read.page].append(read)
    return paged


def _saved(writer, boxes: list[Read], reading: Reading) -> bytes:
    """The document with the boxes' text taken out of its streams and their translations
    drawn over each page."""
    removed: dict[Where, dict[int, float | None]] = {}
    for read in boxes:
        for char in read.chars:
            removed.setdefault(char.shown.where, {})[char.shown.number] = char.shown.advance
    taken_out(writer, removed)
    paged = _by_page(boxes, len(writer.pages))
    for index, page in enumerate(writer.pages):
        drawn = [read.box for read in paged[index]]
        if drawn:
            page.merge_page(_overlay(page, drawn, reading.page_matrices[index]))
        if drawn or ("page", index) in removed:
            page.compress_content_streams()
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _overlay(page, boxes: list[Box], matrix: tuple[float, ...]):
    """A page of `boxes`' translations drawn in `page`'s user space (pdfminer's coordinates
    are its user space by `matrix`: the media box's origin, the page's rotation)."""
    from pypdf import PdfReader
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    drawing = canvas.Canvas(out, pagesize=(float(page.mediabox.width), float(page.mediabox.height)))
    drawing.transform(*_inverse(matrix))
    for box in boxes:
        draw(drawing, box)
    drawing.showPage()
    drawing.save()
    return PdfReader(io.BytesIO(out.getvalue())).pages[0]


def _inverse(matrix: tuple[float, ...]) -> tuple[float, ...]:
    a, b, c, d, e, f = matrix
    det = a * d - b * c
    return (d / det, -b / det, -c / det, a / det, (c * f - d * e) / det, (b * e - a * f) / det)
