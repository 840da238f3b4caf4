"""Presentations (.pptx, python-pptx): every text paragraph of the slides (their shapes',
groups', tables' cells', charts' titles) and of the speaker notes, each in texts of its
runs and line breaks parted by the fields that stay."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

from service.runtime.files import labels
from service.runtime.files.archive import _opened, _saver
from service.runtime.files.labels import Relabel
from service.runtime.files.model import File, Paragraph, said
from service.runtime.files.runs import _local, _runs_writer


def _pptx(data: bytes, suffix: str) -> File:
    import pptx
    from pptx.text.text import _Run

    presentation = _opened(pptx.Presentation, data, suffix)
    paragraphs, parts = [], {}  # parts: the root of each part read (a slide, notes, a chart)
    for paragraph in _pptx_paragraphs(presentation):
        parts.setdefault(paragraph._p.getroottree().getroot(), None)
        for group in _pptx_groups(paragraph._p):
            breaks = [_local(child.tag) == "br" for child in group]
            runs = [_Run(child, paragraph) for child in group if _local(child.tag) == "r"]
            texts = iter(run.text for run in runs)
            read = ["\n" if br else next(texts) for br in breaks]
            if said("".join(read)):
                write = _past_breaks(breaks, _runs_writer(paragraph, runs, _Run))
                paragraphs.append(Paragraph(read, write))
    relabel = _pptx_relabel(list(parts), presentation.part.package)
    return File(paragraphs, "plain", _saver(presentation), relabel=relabel)


DRAWING = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
# the text properties that name a language: a run's, a paragraph end's, a list's defaults
PPTX_LABELLED = tuple(DRAWING + name for name in ("rPr", "endParaRPr", "defRPr"))


def _pptx_relabel(roots: list, package):
    """The `relabel` of a .pptx: each language of the text properties (`lang`, and the
    alternative one, `altLang`) in the parts read, and the document properties'
    (labels.in_properties: python-pptx's part is its properties)."""

    def relabel(wanted: Relabel) -> None:
        labels.in_properties(labels.core_part(package), wanted)
        for root in roots:
            for properties in root.iter(*PPTX_LABELLED):
                for name in ("lang", "altLang"):
                    value = wanted.value(properties.get(name, ""))
                    if value is not None:
                        properties.set(name, value)

    return relabel


def _pptx_groups(element) -> Iterator[list]:
    """A paragraph's runs and line breaks, in groups parted by what else it holds (a field:
    a slide number, a date, which stays), each group one text."""
    group: list = []
    for child in element:
        if _local(child.tag) in ("r", "br"):
            group.append(child)
        elif _local(child.tag) not in ("pPr", "endParaRPr"):
            yield group
            group = []
    yield group


def _past_breaks(breaks: list[bool], write: Callable[[list[tuple[int, str]]], None]):
    """`write` of the runs of text of a paragraph's runs and line breaks (`breaks`: which
    is one): a segment placed in a break goes to the run before it (the one after, at the
    start); a line break a segment holds is a space, the paragraph's own breaks stay."""
    runs = list(itertools.accumulate(not br for br in breaks))  # runs of text up to each

    def moved(placed: list[tuple[int, str]]) -> None:
        merged: list[tuple[int, str]] = []
        for i, text in placed:
            run, text = max(runs[i] - 1, 0), re.sub("[\n\v]", " ", text)
            if merged and merged[-1][0] == run:
                text = merged.pop()[1] + text
            merged.append((run, text))
        write(merged)

    return moved


def _pptx_paragraphs(presentation):
    """Every text paragraph of the slides: their shapes', groups' and tables' cells, their
    charts' titles, and the speaker notes."""

    def of(shapes):
        for shape in shapes:
            if getattr(shape, "shapes", None) is not None:  # a group
                yield from of(shape.shapes)
            if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
                yield from shape.text_frame.paragraphs
            if getattr(shape, "has_table", False) and shape.has_table:
                for row in shape.table.rows:
                    for cell in row.cells:
                        yield from cell.text_frame.paragraphs
            if getattr(shape, "has_chart", False) and shape.has_chart:
                for title in _chart_titles(shape.chart):
                    yield from title.text_frame.paragraphs

    for slide in presentation.slides:
        yield from of(slide.shapes)
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None:  # None: a notes slide without a body
            yield from notes.paragraphs


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
