"""SmartArt diagrams of a .docx or .pptx: a diagram keeps its text in its data part (each
point's paragraphs, dgm:pt/dgm:t/a:p), from which an application lays the diagram out, and
draws it in a cached drawing part (dsp:drawing, each shape's dsp:txBody/a:p), which another
shows as it is; both parts are reached through the relationships of the part that shows
the diagram. Each paragraph is DrawingML text, read and written as a slide's is; a
drawing's paragraph that holds a point's runs is written with that point's (translated
once, the same in both parts), one that holds other text is read on its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.runtime.files.drawingml import DRAWING, _drawing_texts
from service.runtime.files.model import Paragraph
from service.runtime.files.runs import _each

DIAGRAM_DATA = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/diagramData"
DIAGRAM_DRAWING = "http://schemas.microsoft.com/office/2007/relationships/diagramDrawing"
DGM = "{http://schemas.openxmlformats.org/drawingml/2006/diagram}"
DSP = "{http://schemas.microsoft.com/office/drawing/2008/diagram}"


# where a part's paragraphs are: a data part's points' text, a drawing part's shapes'
PARAGRAPHS = {True: f".//{DGM}pt/{DGM}t/{DRAWING}p", False: f".//{DSP}txBody/{DRAWING}p"}


@dataclass
class Diagrams:
    """The diagrams of a document's parts: their paragraphs, each diagram part's root, and
    `saver`, which makes a document's save write the parts' roots first, each where the
    translation or a language changed it (another stays as it was, byte for byte)."""

    paragraphs: list[Paragraph]
    parts: dict  # each diagram part (python-docx's or python-pptx's) -> its root
    read: dict  # each diagram part -> its root's XML (_xml) as it was read

    @property
    def roots(self) -> list:
        """The parts' roots, whose languages are relabelled with the document's."""
        return list(self.parts.values())

    def saver(self, save: Callable[[], bytes]) -> Callable[[], bytes]:
        def saved() -> bytes:
            for part, root in self.parts.items():
                if (written := _xml(root)) != self.read[part]:
                    part._blob = written
            return save()

        return saved


def _diagrams(parts) -> Diagrams:
    """The diagrams the `parts` (python-docx's or python-pptx's) show, the data parts read
    first: a paragraph holding the runs of one read before (a point's cached drawing, a
    point repeated) is written with it."""
    read = _diagram_parts(parts)
    paragraphs, points = [], {}  # points: a data paragraph's texts -> the writers of them
    for root, data in sorted(read.values(), key=lambda held: not held[1]):
        for p in root.iterfind(PARAGRAPHS[data]):
            for texts, write in _drawing_texts(p):
                if tuple(texts) in points:
                    points[tuple(texts)].append(write)
                    continue
                writers = points.setdefault(tuple(texts), []) if data else []
                writers.append(write)
                paragraphs.append(Paragraph(texts, _each(writers)))
    roots = {part: root for part, (root, _) in read.items()}
    return Diagrams(paragraphs, roots, {part: _xml(root) for part, root in roots.items()})


def _xml(root) -> bytes:
    """A diagram part's XML, as its root is written."""
    from lxml import etree

    return etree.tostring(root, encoding="UTF-8", standalone=True)


def _diagram_parts(parts) -> dict:
    """Each diagram part the `parts` relate to, once -> (its root, parsed by python-pptx's
    parser, and whether it is a data part)."""
    from pptx.oxml import parse_xml

    read: dict = {}
    for part in parts:
        for related in part.rels.values():
            data = related.reltype == DIAGRAM_DATA
            if (data or related.reltype == DIAGRAM_DRAWING) and not related.is_external:
                target = related.target_part
                read.setdefault(target, (parse_xml(target.blob), data))
    return read
