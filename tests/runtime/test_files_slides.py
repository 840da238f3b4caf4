"""The drawings a .pptx's slide layouts and masters show on the slides that use them
(service.runtime.files.slides): their shapes that are no placeholder translated once per
part, their placeholders' prompts as they were."""

from __future__ import annotations

import io

import pptx
from helpers import upper_cased
from pptx.util import Inches

from service.runtime import files

PROMPT = "Haga clic para modificar el estilo de título del patrón"


def spanish(frame, text: str) -> None:
    """A text frame holding `text`, its runs declared Spanish, as PowerPoint writes them."""
    frame.text = text
    for paragraph in frame.paragraphs:
        for run in paragraph.runs:
            run._r.get_or_add_rPr().set("lang", "es-ES")


def boxed(tree, shape_id: int):
    """The text frame of a text box added to `tree` (a layout's or a master's shapes'
    element, or a group's): python-pptx adds none to a layout or a master."""
    from pptx.shapes.autoshape import Shape

    sp = tree.add_textbox(shape_id, f"Texto {shape_id}", Inches(1), Inches(6), Inches(3), Inches(1))
    return Shape(sp, None).text_frame


def prompts(presentation) -> list[tuple[str, list[str]]]:
    """The text of every placeholder of the layouts and masters, with its runs' languages."""
    held = []
    for master in presentation.slide_masters:
        for owner in (master, *master.slide_layouts):
            for shape in owner.placeholders:
                languages = shape._element.xpath(".//a:rPr/@lang")
                held.append((shape.text_frame.text, languages))
    return held


def translated(data: bytes, seen: list[str] | None = None) -> tuple[object, bytes]:
    """The file of `data` read, its texts upper-cased (each told to `seen`), declared
    English and saved."""
    read = files.read_file(".pptx", data)
    for batch in read.batches(64):
        if seen is not None:
            seen += batch.texts
        batch.write([upper_cased(text) for text in batch.texts])
    read.declare("es", "en")
    return read, read.save()


def saved(presentation) -> bytes:
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def drawings(owner) -> list[str]:
    """The text of each shape of a layout or master that is no placeholder (a group's
    shapes' and a table's cells' each)."""
    held = []
    for shape in owner.shapes:
        if shape.is_placeholder:
            continue
        if getattr(shape, "shapes", None) is not None:
            held += [each.text_frame.text for each in shape.shapes]
        elif shape.has_text_frame:
            held.append(shape.text_frame.text)
        else:
            held += [cell.text_frame.text for row in shape.table.rows for cell in row.cells]
    return held


def test_a_pptx_layout_s_drawing_is_translated_once_for_the_slides_that_show_it():
    """A text box on a layout ("Confidencial" on every slide of it) stayed Spanish on every
    slide; it is translated once, however many slides show it, its runs declared English as
    a slide's are. The placeholders' prompts, which a slide's own placeholder replaces and
    no slide shows, stay as they were, Spanish."""
    presentation = pptx.Presentation()
    master, layout = presentation.slide_masters[0], presentation.slide_layouts[6]
    spanish(master.placeholders[0].text_frame, PROMPT)
    spanish(layout.placeholders[0].text_frame, "Fecha")  # the layout's date's prompt
    spanish(boxed(layout.shapes._spTree, 20), "Confidencial")
    for number in (1, 2):
        slide = presentation.slides.add_slide(layout)
        box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1))
        spanish(box.text_frame, f"Diapositiva {number}.")
    before = prompts(presentation)
    seen: list[str] = []
    read, data = translated(saved(presentation), seen)
    assert [p.text for p in read.paragraphs] == ["Diapositiva 1.", "Diapositiva 2.", "Confidencial"]
    assert seen.count("Confidencial") == 1
    written = pptx.Presentation(io.BytesIO(data))
    (drawn,) = [s for s in written.slide_layouts[6].shapes if not s.is_placeholder]
    assert drawn.text_frame.text == "CONFIDENCIAL"
    assert written.slides[1].shapes[0].text_frame.text == "DIAPOSITIVA 2."
    slide_languages = written.slides[0].shapes[0]._element.xpath(".//a:rPr/@lang")
    assert slide_languages == ["en"] and drawn._element.xpath(".//a:rPr/@lang") == ["en"]
    assert prompts(written) == before
    assert (PROMPT, ["es-ES"]) in before and ("Fecha", ["es-ES"]) in before


def test_a_pptx_master_s_box_group_and_table_are_translated():
    """The master's shapes that are no placeholder show on every slide of its layouts: a
    text box, a group's shapes and a table's cells are translated, their runs declared
    English."""
    from pptx.shapes.graphfrm import GraphicFrame

    presentation = pptx.Presentation()
    master = presentation.slide_masters[0]
    spanish(boxed(master.shapes._spTree, 20), "Empresa S.A.")
    spanish(boxed(master.shapes._spTree.add_grpSp(), 22), "Agrupado.")
    held = master.shapes._spTree.add_table(24, "Tabla", 1, 1, 0, 0, Inches(2), Inches(1))
    spanish(GraphicFrame(held, None).table.cell(0, 0).text_frame, "Celda.")
    presentation.slides.add_slide(presentation.slide_layouts[6])
    read, data = translated(saved(presentation))
    assert [p.text for p in read.paragraphs] == ["Empresa S.A.", "Agrupado.", "Celda."]
    master = pptx.Presentation(io.BytesIO(data)).slide_masters[0]
    assert drawings(master) == ["EMPRESA S.A.", "AGRUPADO.", "CELDA."]
    languages = master._element.xpath("p:cSld/p:spTree/*[not(.//p:ph)]//a:rPr/@lang")
    assert languages == ["en"] * 3


def test_a_pptx_layout_no_slide_shows_and_the_notes_master_stay():
    """A layout no slide uses, one whose every slide hides it ("Hide background graphics")
    and a master its layout hides are not shown on a slide, nor is the notes master: their
    text stays, not read."""
    presentation = pptx.Presentation()
    master, layouts = presentation.slide_masters[0], presentation.slide_layouts
    spanish(boxed(master.shapes._spTree, 20), "Empresa S.A.")
    for number, layout in enumerate(layouts):
        spanish(boxed(layout.shapes._spTree, 20), f"Diseño {number}")
    layouts[6]._element.set("showMasterSp", "0")
    presentation.slides.add_slide(layouts[6])
    presentation.slides.add_slide(layouts[5])._element.set("showMasterSp", "false")
    notes = presentation.notes_master
    spanish(boxed(notes.shapes._spTree, 20), "Notas de la empresa")
    read, data = translated(saved(presentation))
    assert [p.text for p in read.paragraphs] == ["Diseño 6"]
    written = pptx.Presentation(io.BytesIO(data))
    assert drawings(written.slide_masters[0]) == ["Empresa S.A."]
    shown = [drawings(layout) for layout in written.slide_layouts]
    assert shown == [[f"Diseño {n}" if n != 6 else "DISEÑO 6"] for n in range(len(shown))]
    assert drawings(written.notes_master) == ["Notas de la empresa"]


def test_a_pptx_slide_that_names_no_layout_is_read():
    """A slide must name its layout, and a master's layouts their master; a file that does
    not (another tool's) is read as python-pptx reads it, its slides' text translated."""
    from pptx.opc.constants import RELATIONSHIP_TYPE

    presentation = pptx.Presentation()
    layout = presentation.slide_layouts[6]
    spanish(boxed(layout.shapes._spTree, 20), "Confidencial")
    for number in (1, 2):
        slide = presentation.slides.add_slide(layout)
        spanish(slide.shapes.add_textbox(0, 0, Inches(4), Inches(1)).text_frame, f"Hoja {number}")
    rels = presentation.slides[0].part.rels
    rels.pop(next(k for k, r in rels.items() if r.reltype == RELATIONSHIP_TYPE.SLIDE_LAYOUT))
    rels = layout.part.rels
    rels.pop(next(k for k, r in rels.items() if r.reltype == RELATIONSHIP_TYPE.SLIDE_MASTER))
    read, data = translated(saved(presentation))
    assert [p.text for p in read.paragraphs] == ["Hoja 1", "Hoja 2", "Confidencial"]
    assert pptx.Presentation(io.BytesIO(data)).slides[0].shapes[0].text_frame.text == "HOJA 1"


def test_a_pptx_s_text_styles_say_the_target_language():
    """Runs that name no language inherit the text styles': the presentation's default, the
    masters' and the notes master's name the target once translated, as the runs do; a
    language the author set apart stays."""
    from pptx.oxml.ns import qn

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "El perro come pan."
    slide.notes_slide.notes_text_frame.text = "Unas notas."
    owners = {
        "default": presentation._element.find(qn("p:defaultTextStyle")),
        "master": presentation.slide_masters[0]._element.find(qn("p:txStyles")),
        "notes": presentation.notes_master._element.find(qn("p:notesStyle")),
    }
    for owner in owners.values():
        first, second, *_ = owner.iter(qn("a:defRPr"))
        first.set("lang", "es-ES")
        second.set("lang", "fr-FR")
    _, data = translated(saved(presentation))
    again = pptx.Presentation(io.BytesIO(data))
    owners = {
        "default": again._element.find(qn("p:defaultTextStyle")),
        "master": again.slide_masters[0]._element.find(qn("p:txStyles")),
        "notes": again.notes_master._element.find(qn("p:notesStyle")),
    }
    for name, owner in owners.items():
        first, second, *_ = owner.iter(qn("a:defRPr"))
        assert (first.get("lang"), second.get("lang")) == ("en", "fr-FR"), name
    assert again.slides[0].shapes.title.text == "EL PERRO COME PAN."
