"""Presentations (.pptx, python-pptx): every text paragraph of the slides (their shapes',
groups', tables' cells', charts' titles, SmartArt diagrams: diagrams), of the speaker
notes, and of the drawings the slides' layouts and masters show on them (their shapes that
are no placeholder: a company's name, "Confidencial"), each in texts of its runs and line
breaks parted by the fields that stay (drawingml); the language of those and of the text
styles they inherit relabelled."""

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
    behind = _shown_behind(presentation.slides)
    # bodies: the text bodies read of the layouts' and masters' drawings, relabelled (not
    # their parts: the placeholders' prompts stay, as does the language they say)
    bodies = {}
    for paragraph in _drawings_paragraphs(behind):
        bodies.setdefault(paragraph._p.getparent(), None)
        paragraphs += [Paragraph(read, write) for read, write in _drawing_texts(paragraph._p)]
    drawn = _diagrams([slide.part for slide in presentation.slides] + [s.part for s in behind])
    paragraphs += drawn.paragraphs
    styles = _text_styles(presentation)
    drawing = _drawing_relabel([*parts, *bodies, *drawn.roots, *styles])
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


def _shown_behind(slides) -> list:
    """The layouts and masters whose drawings `slides` show, each once, in the order the
    slides first show them: each slide's layout and that layout's master, but for a slide
    that hides them, and a master its layout hides ("Hide background graphics").

    A layout no slide shows is not read: its text is the template's, as a placeholder's
    prompt is, no reader sees it, and a template's dozens of layouts would be translated for
    nothing (a slide added from one later shows it in the source language)."""
    shown = {}  # each part -> its layout or master
    for slide in slides:
        layout = _behind(slide, "slide_layout") if _shows_master(slide) else None
        if layout is None:
            continue
        shown.setdefault(layout.part, layout)
        master = _behind(layout, "slide_master") if _shows_master(layout) else None
        if master is not None:
            shown.setdefault(master.part, master)
    return list(shown.values())


def _behind(slide, name: str):
    """A slide's layout or a layout's master (python-pptx's attribute `name`), None where
    its part relates to none (a file another tool wrote), which python-pptx reads as a
    KeyError."""
    try:
        return getattr(slide, name)
    except KeyError:
        return None


def _shows_master(slide) -> bool:
    """Whether a slide shows its layout's and master's drawings, or a layout its master's
    (`showMasterSp`, an XML boolean, true where it is not written)."""
    return slide._element.get("showMasterSp", "true") not in ("0", "false")


def _drawings_paragraphs(behind):
    """Every text paragraph of the drawings of the layouts and masters `behind` the slides:
    their shapes that are no placeholder. A placeholder holds a prompt ("Haga clic para
    modificar el estilo de título del patrón"), shown while a slide is edited and never
    on it, which the slide's own placeholder replaces: it stays."""
    for each in behind:
        yield from _shapes_paragraphs(s for s in each.shapes if not s.is_placeholder)


def _text_styles(presentation) -> list:
    """The text styles whose run properties the translated text inherits where a run names no
    language of its own: the presentation's default (`p:defaultTextStyle`), the title, body
    and other styles of the masters the slides use (`p:txStyles`, whether or not a slide
    shows the master's drawings), and the notes master's (`p:notesStyle`) where a slide has
    notes (python-pptx makes a notes master where it is asked for one the file lacks)."""
    from pptx.oxml.ns import qn

    held = [(presentation.part._element, "p:defaultTextStyle")]
    masters = {}
    for slide in presentation.slides:
        layout = _behind(slide, "slide_layout")
        master = _behind(layout, "slide_master") if layout is not None else None
        if master is not None:
            masters.setdefault(master.part, master)
    held += [(master._element, "p:txStyles") for master in masters.values()]
    if any(slide.has_notes_slide for slide in presentation.slides):
        held.append((presentation.notes_master._element, "p:notesStyle"))
    return [style for owner, name in held if (style := owner.find(qn(name))) is not None]


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
