"""Word documents (.docx, python-docx): every paragraph of the body, the headers and
footers, the notes and comments, wherever it sits (tables, content controls, text boxes
read once), each one text of its runs of plain text, and the text of their SmartArt
diagrams (diagrams); fields, pictures and notes' marks stay where they are; a control
bound to custom XML agrees with its data once saved (bindings)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

from service.runtime.files import labels
from service.runtime.files.archive import _opened, _saver
from service.runtime.files.bindings import _bindings
from service.runtime.files.diagrams import _diagrams
from service.runtime.files.drawingml import _drawing_relabel
from service.runtime.files.labels import Relabel
from service.runtime.files.model import File, Paragraph, said
from service.runtime.files.runs import _each, _edged, _local, _runs_writer


def _docx(data: bytes, suffix: str) -> File:
    import docx

    document = _opened(docx.Document, data, suffix)
    paragraphs, roots = [], _docx_roots(document)
    ids = _DocxIds(roots)
    for root in roots:
        for element, copies in _docx_paragraphs(root):
            runs, write = _docx_runs(element, ids)
            if said("".join(r.text for r in runs)):
                writers = [write, *(_docx_runs(copied, ids)[1] for copied in copies)]
                paragraphs.append(Paragraph([r.text for r in runs], _each(writers)))
    drawn = _diagrams(roots.values())
    paragraphs += drawn.paragraphs
    relabel = _docx_relabel(document, roots, _drawing_relabel(drawn.roots))
    save = _docx_saver(document, roots, _bindings(document, roots))
    return File(paragraphs, "plain", drawn.saver(save), relabel=relabel)


def _docx_relabel(document, roots: dict, drawn: Callable[[Relabel], None]):
    """The `relabel` of a .docx: each language (w:lang's w:val) of the parts read and of the
    styles that format them (the defaults of every run among them; a styles part of another
    content type, which python-docx holds as bytes, stays), those of its diagrams'
    DrawingML text (`drawn`) and the document properties' (labels.in_properties); an East
    Asian or a right-to-left language (w:eastAsia, w:bidi) is no Spanish text's, and
    stays."""
    from docx.opc.constants import RELATIONSHIP_TYPE

    def relabel(wanted: Relabel) -> None:
        core = labels.core_part(document.part.package)
        labels.in_properties(None if core is None else core.core_properties, wanted)
        drawn(wanted)
        styles = [
            related.target_part.element
            for related in document.part.rels.values()
            if related.reltype == RELATIONSHIP_TYPE.STYLES
            and not related.is_external
            and hasattr(related.target_part, "element")
        ]
        for root in [*roots, *styles]:
            for lang in root.iter(qn_w("lang")):
                value = wanted.value(lang.get(qn_w("val"), ""))
                if value is not None:
                    lang.set(qn_w("val"), value)

    return relabel


def _docx_runs(p, ids=None) -> tuple[list, Callable[[list[tuple[int, str]]], None]]:
    """A paragraph element's runs of plain text (python-docx's Run) and their writer, which
    gives its copies fresh ids from `ids` (a _DocxIds) where theirs would repeat."""
    from docx.text.paragraph import Paragraph as DocxParagraph
    from docx.text.run import Run

    paragraph = DocxParagraph(p, None)
    texts, parted = _docx_text_runs(p)
    runs = [Run(r, paragraph) for r in texts]
    renew = None if ids is None else ids.renew
    write = _runs_writer(paragraph, runs, Run, renew)
    return runs, _edged([r.text for r in runs], parted, write)


class _DocxIds:
    """The ids (w:id) of a document's parts: of its revisions, comments, bookmarks, content
    controls, each unique in the document (ECMA-376; Word repairs or refuses a file that
    repeats one), and fresh ones above the largest for the copies a writer makes."""

    def __init__(self, roots):
        self.roots = roots
        self.taken: set[int] | None = None  # read at the first fresh id needed, not each read
        self.next = 1  # where the search for a free id goes on

    def renew(self, copies: list[tuple]) -> None:
        """Fresh ids in the copies (each with its original) whose ids would repeat: the
        first copy of an original no longer in the document keeps its ids, the others
        (copies of what stays, or later copies) take fresh ones."""
        kept = set()
        for original, copied in copies:
            if original.getparent() is None and original not in kept:
                kept.add(original)
                continue
            for node, name in _docx_ided([copied, *_docx_properties(copied)]):
                node.set(name, self.fresh())

    def fresh(self) -> str:
        if self.taken is None:
            nodes = itertools.chain.from_iterable(root.iter() for root in self.roots)
            values = (node.get(name) for node, name in _docx_ided(nodes))
            self.taken = {int(v) for v in values if re.fullmatch(r"-?\d+", v)}
            if max(self.taken, default=0) < DOCX_LARGEST_ID:  # else the free ones below it
                self.next = max(self.taken, default=0) + 1
        while self.next in self.taken:
            self.next += 1
        self.taken.add(self.next)
        return str(self.next)


DOCX_LARGEST_ID = 2**31 - 1  # a content control's id is a signed 32-bit number in Word


def _docx_ided(nodes) -> Iterator[tuple]:
    """Each id of `nodes` as (node, its attribute): a revision's, a comment's or a bookmark's
    w:id attribute, a content control's w:id element's w:val."""
    for node in nodes:
        if node.get(qn_w("id")) is not None:
            yield node, qn_w("id")
        if node.tag == qn_w("id") and node.get(qn_w("val")) is not None:
            yield node, qn_w("val")


def _docx_properties(element) -> Iterator:
    """What the properties of `element` hold (a content control's id, a run's formatting
    change), not its content."""
    for child in element:
        if _local(child.tag).endswith("Pr"):
            yield from child.iter()


# the parts of a .docx besides its body and its headers and footers that hold text a reader
# sees, in the order they are read
DOCX_NOTES = ("footnotes", "endnotes", "comments")


def _docx_roots(document) -> dict:
    """The root element of each part whose paragraphs are read -> its part: the body, every
    header and footer of every section (first-page and even-page ones too) not linked to the
    one before, each once (sections may name one header's part), the footnotes, endnotes and
    comments. python-docx keeps footnotes and endnotes as bytes: they are parsed here."""
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml.parser import parse_xml

    roots = {document.element: document.part}
    for section in document.sections:
        for part in (
            section.header,
            section.footer,
            section.first_page_header,
            section.first_page_footer,
            section.even_page_header,
            section.even_page_footer,
        ):
            if not part.is_linked_to_previous and part.part.element not in roots:
                roots[part.part.element] = part.part
    for name in DOCX_NOTES:
        relation = getattr(RELATIONSHIP_TYPE, name.upper())
        for related in document.part.rels.values():
            if related.reltype == relation and not related.is_external:
                part = related.target_part
                root = part.element if hasattr(part, "element") else parse_xml(part.blob)
                roots[root] = part
    return roots


def _docx_saver(document, roots: dict, bind: Callable[[], None]):
    """The `save` of a .docx: its bound controls and their data made to agree (`bind`:
    bindings._bindings), then the parts held as bytes take their parsed roots' text."""
    from docx.opc.oxml import serialize_part_xml

    saved = _saver(document)

    def save() -> bytes:
        bind()
        for root, part in roots.items():
            if getattr(part, "element", None) is not root:
                part._blob = serialize_part_xml(root)
        return saved()

    return save


MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"


def _docx_paragraphs(root) -> Iterator[tuple]:
    """Every paragraph of a part in document order, each with its copies: wherever it sits
    (a table, nested ones too, a content control, a text box). Word writes a text box twice,
    as DrawingML and as VML for older readers (mc:AlternateContent): the VML paragraphs that
    hold the same runs are the DrawingML ones' copies, not read on their own."""
    copies: dict = {}
    for alternate in root.iter(MC + "AlternateContent"):
        choice, fallback = alternate.find(MC + "Choice"), alternate.find(MC + "Fallback")
        if choice is None or fallback is None:
            continue
        ours, theirs = list(choice.iter(qn_w("p"))), list(fallback.iter(qn_w("p")))
        if [_docx_texts(p) for p in ours] == [_docx_texts(p) for p in theirs]:
            for p, copied in zip(ours, theirs, strict=True):
                copies.setdefault(p, []).append(copied)
    taken = {copied for held in copies.values() for copied in held}
    for p in root.iter(qn_w("p")):
        if p not in taken:
            yield p, copies.get(p, [])


def _docx_texts(p) -> list[str]:
    return [run.text for run in _docx_runs(p)[0]]


# what a run of plain text holds; a run holding anything else (a picture, a field's code or
# mark, a note's reference, an object) is left as it is
DOCX_TEXT = {"rPr", "t", "tab", "br", "cr", "noBreakHyphen", "softHyphen", "lastRenderedPageBreak"}
# what holds runs inside a paragraph: a hyperlink, a content control (a form's field), a
# tracked insertion or move; a deletion's, a simple field's and a math zone's runs stay
DOCX_INLINE = {"hyperlink", "sdt", "sdtContent", "smartTag", "customXml", "ins", "moveTo"}


def _docx_text_runs(p) -> tuple[list, list[bool]]:
    """The paragraph element's runs (w:r) of plain text, in order, those inside a hyperlink,
    a content control or an insertion among them; those holding more than text are left
    out, and stay, as are those of a field's code and those of the result of a field that
    ends in the paragraph (a page number); a field going on past it (a table of contents)
    holds paragraphs of text, read as any other. With them, whether something that stays
    sits before each run and after the last (_edged)."""
    fields: list[tuple[int, bool]] = []  # each open field's (number, in its code)
    ending, count, seen = set(), 0, []  # ending: the fields (their numbers) that end here
    for run in _docx_inline(p):
        seen.append((run, list(fields)))
        for child in run:
            mark = child.get(qn_w("fldCharType")) if _local(child.tag) == "fldChar" else None
            if mark == "begin":
                fields.append((count, True))
                count += 1
            elif mark == "separate" and fields:
                fields[-1] = (fields[-1][0], False)
            elif mark == "end" and fields:
                ending.add(fields.pop()[0])
    runs, parted, between = [], [], False  # between: something stays since the last run
    for run, held in seen:
        plain = {_local(child.tag) for child in run} <= DOCX_TEXT
        if plain and not any(code or number in ending for number, code in held):
            runs.append(run)
            parted.append(between)
            between = False
        else:
            between = True
    return runs, [*parted, between]


# what a paragraph shows besides runs: a simple field, an equation
DOCX_SHOWN = {"r", "fldSimple", "oMath"}


def _docx_inline(element) -> Iterator:
    """The runs of a paragraph, and what else it shows between them (DOCX_SHOWN)."""
    for child in element:
        if _local(child.tag) in DOCX_SHOWN:
            yield child
        elif _local(child.tag) in DOCX_INLINE:
            yield from _docx_inline(child)


def qn_w(name: str) -> str:
    """WordprocessingML's namespaced attribute `name`."""
    return "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}" + name
