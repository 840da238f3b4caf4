"""Presentations (.pptx, python-pptx): every text paragraph of the slides (their shapes',
groups', tables' cells', charts' titles, SmartArt diagrams: diagrams) and of the speaker
notes, each in texts of its runs and line breaks parted by the fields that stay
(drawingml)."""

from __future__ import annotations

from service.runtime.files import labels
from service.runtime.files.archive import _opened, _saver
from service.runtime.files.diagrams import _diagrams
from service.runtime.files.drawingml import _drawing_relabel, _drawing_texts
from service.runtime.files.labels import Relabel
from service.runtime.files.model import File, Paragraph


def _pptx(data: bytes, suffix: str) -> File:
    import pptx

    presentation = _opened(pptx.Presentation, data, suffix)
    paragraphs, parts = [], {}  # parts: the root of each part read (a slide, notes, a chart)
    for paragraph in _pptx_paragraphs(presentation):
        parts.setdefault(paragraph._p.getroottree().getroot(), None)
        paragraphs += [Paragraph(read, write) for read, write in _drawing_texts(paragraph._p)]
    drawn = _diagrams([slide.part for slide in presentation.slides])
    paragraphs += drawn.paragraphs
    drawing = _drawing_relabel([*parts, *drawn.roots])
    package = presentation.part.package

    def relabel(wanted: Relabel) -> None:
        """The text's languages (drawingml) and the document properties'
        (labels.in_properties: python-pptx's part is its properties)."""
        labels.in_properties(labels.core_part(package), wanted)
        drawing(wanted)

    return File(paragraphs, "plain", drawn.saver(_saver(presentation)), relabel=relabel)


def _pptx_paragraphs(presentation):
    """Every text paragraph of the slides: their shapes', groups' and tables' cells, their
    charts' titles, and the speaker notes."""
    for slide in presentation.slides:
        yield from _shapes_paragraphs(slide.shapes)
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None:  # None: a notes slide without a body
            yield from notes.paragraphs


def _shapes_paragraphs(shapes):
    """Every text paragraph of `shapes`: their own, their groups' (nested ones too), their
    tables' cells' and their charts' titles'."""
    for shape in shapes:
        if getattr(shape, "shapes", None) is not None:  # a group
            yield from _shapes_paragraphs(shape.shapes)
        if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            yield from shape.text_frame.paragraphs
        if getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                for cell in row.cells:
                    yield from cell.text_frame.paragraphs
        if getattr(shape, "has_chart", False) and shape.has_chart:
            for title in _chart_titles(shape.chart):
                yield from title.text_frame.paragraphs


def _chart_titles(chart) -> list:
    """A chart's title and its axes' titles that hold their own text (a title Office
    writes from the data, as a pie's from its series, has none: it stays)."""
    titles = [chart.chart_title] if chart.has_title else []
    for axis in ("category_axis", "value_axis"):
        try:
            held = getattr(chart, axis)
        except ValueError:  # a chart without it (a pie)
            continue
        titles += [held.axis_title] if held.has_title else []
    return [title for title in titles if title.has_text_frame]
