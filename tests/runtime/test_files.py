"""Files translated whole (service.runtime.files): each format read into paragraphs of
runs and written back, and a translation cut into runs by its alignment."""

from __future__ import annotations

import codecs
import copy
import html
import io
import re
import zipfile
from xml.etree import ElementTree

import docx
import pptx
import pytest
from helpers import CHAPTER, SHIPPED_TRANSLATOR, epub, upper_cased
from odf import draw, teletype, text
from odf.element import Text
from odf.opendocument import OpenDocumentPresentation, OpenDocumentText, load
from odf.style import MasterPage, PageLayout, Style, TextProperties
from pptx.util import Inches

from service.runtime import documents, files, markup
from service.runtime.files import archive, subtitles
from service.runtime.files.alignment import segments
from service.runtime.files.drawingml import _past_breaks
from service.runtime.files.model import joined
from service.runtime.files.opendocument import _odf_runs
from service.runtime.files.runs import _edged
from service.runtime.files.texts import html_pieces
from service.runtime.files.word import qn_w
from tests.helpers import growth


def aligned(source_pieces, target_pieces, best, text_out, source_end):
    """A /v1 translation of one sentence whose target piece i attends to source piece best[i]."""
    weights = []
    for b in best:
        weights += [1.0 if s == b else 0.0 for s in range(len(source_pieces))]
    alignment = {"sourceTokens": source_pieces, "targetTokens": target_pieces, "weights": weights}
    return {
        "hypotheses": [{"text": text_out}],
        "sentences": [
            {"sourceEnd": source_end, "targetEnd": len(text_out), "alignment": alignment}
        ],
    }


BOLD_VERB = aligned(
    ["▁El", "▁perro", "▁come", "▁pan", ".", "</s>"],
    ["▁The", "▁dog", "▁eat", "s", "▁bread", ".", "</s>"],
    [0, 1, 2, 2, 3, 4, 5],
    "The dog eats bread.",
    18,
)


def test_each_target_word_goes_to_the_run_of_its_source_word():
    runs = ["El perro ", "come", " pan."]
    assert segments(runs, BOLD_VERB) == [(0, "The dog"), (1, " eats"), (2, " bread.")]
    assert segments(["El perro come pan."], BOLD_VERB) == [(0, "The dog eats bread.")]
    # the alignment at the hypothesis, as for a text of one sentence
    alignment = BOLD_VERB["sentences"][0]["alignment"]
    moved = {
        "hypotheses": [{**BOLD_VERB["hypotheses"][0], "alignment": alignment}],
        "sentences": [{**BOLD_VERB["sentences"][0], "alignment": None}],
    }
    assert segments(runs, moved) == [(0, "The dog"), (1, " eats"), (2, " bread.")]


def test_a_text_that_is_not_its_pieces_goes_whole_to_one_run():
    changed = {**BOLD_VERB, "hypotheses": [{"text": "The dog eats bread, https://x.org."}]}
    changed["sentences"] = [{**BOLD_VERB["sentences"][0], "targetEnd": 33}]
    placed = segments(["El perro ", "come", " pan."], changed)
    assert placed == [(0, "The dog eats bread, https://x.org.")]  # the first of the most
    unaligned = {"hypotheses": [{"text": "Hi."}], "sentences": [{"sourceEnd": 18, "targetEnd": 3}]}
    assert segments(["El perro ", "come", " pan."], unaligned) == [(1, "Hi.")]


def test_the_white_space_beside_what_stays_between_runs_is_the_source_s():
    """ "Página " PAGE " de " NUMPAGES: a translation's words carry the space before them,
    and "Page1 of 5" came back; the space beside the field is the source run's. Segments
    out of their runs' order are written as they are (all go where the first run was)."""
    written: list[tuple[int, str]] = []
    write = _edged(["Página ", " de "], [False, True, True], written.extend)
    write([(0, "Page"), (1, " of")])
    assert written == [(0, "Page "), (1, " of ")]
    written.clear()
    write([(1, "of"), (0, " Page")])
    assert written == [(1, "of"), (0, " Page")]


def test_a_slide_s_line_breaks_stay_and_take_no_text():
    """A slide paragraph's runs and line breaks are read as one text: a segment the
    alignment puts in a break goes to the run before it (the one after, at the start), a
    line break a translation holds is a space, and the white space at a run's edge beside
    a break is the source run's."""
    written: list[tuple[int, str]] = []
    write = _past_breaks([False, True, False], ["Hola", "a todos"], written.extend)
    write([(0, "Hi"), (1, "\n"), (2, "all\vof you")])
    assert written == [(0, "Hi"), (1, "all of you")]
    written.clear()
    write([(0, "Hi \n"), (2, " all of you")])  # no space at either side of the break
    assert written == [(0, "Hi"), (1, "all of you")]
    written.clear()
    _past_breaks([False, True, False], ["Hola ", "a todos"], written.extend)([(0, "Hi\n")])
    assert written == [(0, "Hi ")]  # the source's space before the break stays
    written.clear()
    _past_breaks([True, False], [" hola"], written.extend)([(0, "Hi"), (1, " all")])
    assert written == [(0, " Hi all")]


def test_a_docx_keeps_its_runs_tables_and_headers():
    document = docx.Document()
    document.add_heading("Título", level=1)
    paragraph = document.add_paragraph("El perro ")
    paragraph.add_run("come").bold = True
    paragraph.add_run(" pan.")
    document.add_paragraph("   ")  # nothing to translate
    document.add_table(rows=1, cols=1).cell(0, 0).text = "Buenos días."
    document.sections[0].header.paragraphs[0].text = "Cabecera"
    out = io.BytesIO()
    document.save(out)
    read = files.read_file(".docx", out.getvalue())
    assert read.text_format == "plain"
    assert [p.runs for p in read.paragraphs] == [
        ["Título"],
        ["El perro ", "come", " pan."],
        ["Buenos días."],
        ["Cabecera"],
    ]
    read.paragraphs[0].write([(0, "Title")])
    read.paragraphs[1].write([(0, "The dog"), (1, " eats"), (2, " bread.")])
    read.paragraphs[2].write([(0, "Good morning.")])
    read.paragraphs[3].write([(0, "Header")])
    written = docx.Document(io.BytesIO(read.save()))
    assert written.paragraphs[0].text == "Title" and written.paragraphs[0].style.name == "Heading 1"
    runs = [(r.text, bool(r.bold)) for r in written.paragraphs[1].runs]
    assert runs == [("The dog", False), (" eats", True), (" bread.", False)]
    assert written.tables[0].cell(0, 0).text == "Good morning."
    assert written.sections[0].header.paragraphs[0].text == "Header"


def test_a_docx_reads_a_merged_cell_once_every_header_and_leaves_fields_and_links_whole():
    """A merged cell (python-docx gives it once a grid column it spans) is one paragraph;
    first-page and even-page headers are read too; a field (a page number) and a picture
    stay as they are beside the text around them, and a hyperlink's text is translated
    inside the hyperlink."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Hola amigo."
    table.cell(1, 0).text, table.cell(1, 1).text = "Uno.", "Dos."
    section = document.sections[0]
    section.different_first_page_header_footer = True
    section.first_page_header.paragraphs[0].text = "Primera"
    footer = section.footer.paragraphs[0]
    footer.add_run("Página ")
    for kind, code in (("begin", None), (None, " PAGE "), ("separate", None), (None, None)):
        run = footer.add_run("1" if kind is None and code is None else None)
        if kind:
            mark = OxmlElement("w:fldChar")
            mark.set(qn("w:fldCharType"), kind)
            run._r.append(mark)
        elif code:
            instruction = OxmlElement("w:instrText")
            instruction.text = code
            run._r.append(instruction)
    end = OxmlElement("w:fldChar")
    end.set(qn("w:fldCharType"), "end")
    footer.add_run()._r.append(end)
    linked = document.add_paragraph("Visite ")
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), "rId99")
    inside, text = OxmlElement("w:r"), OxmlElement("w:t")
    text.text = "nuestro sitio"
    inside.append(text)
    link.append(inside)
    linked._p.append(link)
    linked.add_run(" hoy.")
    out = io.BytesIO()
    document.save(out)
    read = files.read_file(".docx", out.getvalue())
    assert [p.runs for p in read.paragraphs] == [  # in the document's order
        ["Hola amigo."],
        ["Uno."],
        ["Dos."],
        ["Visite ", "nuestro sitio", " hoy."],
        ["Página "],  # the field's runs stay out
        ["Primera"],
    ]
    translations = ["Hello friend.", "One.", "Two.", "Visit |our site| today.", "Page ", "First"]
    for paragraph, translation in zip(read.paragraphs, translations, strict=True):
        parts = translation.split("|")
        paragraph.write(list(enumerate(parts)))
    written = docx.Document(io.BytesIO(read.save()))
    cells = [c.text for row in written.tables[0].rows for c in row.cells]
    assert cells == ["Hello friend.", "Hello friend.", "One.", "Two."]
    (hyperlink,) = written.paragraphs[0].hyperlinks
    assert hyperlink.text == "our site" and written.paragraphs[0].text == "Visit our site today."
    foot = written.sections[0].footer.paragraphs[0]
    assert foot.text == "Page 1" and " PAGE " in foot._p.xml and 'fldCharType="end"' in foot._p.xml
    assert written.sections[0].first_page_header.paragraphs[0].text == "First"


CONTROL = ("sdt", "sdtPr", "sdtContent")  # a content control, its properties, its runs


def held_docx(*runs: tuple[str, str | None]) -> bytes:
    """A .docx of one paragraph of runs, each (its text, what holds it: None, "link",
    "control", a content control with its properties, or "insertion", a tracked one). A
    control's or an insertion's id is its run's number + 1."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    paragraph = document.add_paragraph()
    for number, (words, holder) in enumerate(runs):
        run = paragraph.add_run(words)
        if holder == "link":
            link = OxmlElement("w:hyperlink")
            link.set(qn("r:id"), "rId99")
            run._r.addprevious(link)
            link.append(run._r)
        elif holder == "control":
            control, properties, content = (OxmlElement(f"w:{n}") for n in CONTROL)
            identity = OxmlElement("w:id")
            identity.set(qn("w:val"), str(number + 1))
            properties.extend([identity, OxmlElement("w:temporary")])
            run._r.addprevious(control)
            control.extend([properties, content])
            content.append(run._r)
        elif holder == "insertion":
            insertion = OxmlElement("w:ins")
            insertion.set(qn("w:id"), str(number + 1))
            insertion.set(qn("w:author"), "Ana")
            run._r.addprevious(insertion)
            insertion.append(run._r)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def docx_saved(data: bytes, placed: list[tuple[int, str]]) -> bytes:
    """The .docx with its one paragraph written with `placed`."""
    read = files.read_file(".docx", data)
    read.paragraphs[0].write(placed)
    return read.save()


def docx_written(data: bytes, placed: list[tuple[int, str]]) -> list[tuple[str, str]]:
    """The .docx's one paragraph written with `placed`: its children (each its local name
    and its text), its properties left out."""
    from docx.oxml.ns import qn

    written = docx.Document(io.BytesIO(docx_saved(data, placed))).paragraphs[0]._p
    children = [c for c in written if c.tag != qn("w:pPr")]
    return [
        (c.tag.rpartition("}")[2], "".join(t.text for t in c.iter(qn("w:t")))) for c in children
    ]


def docx_ids(data: bytes) -> list[str]:
    """Every id of a .docx's document.xml, as its XML says it: revisions' w:id attributes,
    content controls' w:id elements' w:val."""
    with zipfile.ZipFile(io.BytesIO(data)) as archived:
        root = ElementTree.fromstring(archived.read("word/document.xml"))
    attribute = [e.get(qn_w("id")) for e in root.iter() if e.get(qn_w("id")) is not None]
    return attribute + [e.get(qn_w("val")) for e in root.iter(qn_w("id"))]


def test_a_docx_link_s_words_moved_by_the_translation_stay_linked():
    """Where a translation puts words in another order ("el perro [rojo]" as "the [red]
    dog"), every segment goes where the first run was: the hyperlink's word went out of its
    link, left empty, and where the first run was linked the whole paragraph went into the
    link. Each segment now sits in a copy of what holds its run in the paragraph (a
    hyperlink and its target, a content control and its properties)."""
    data = held_docx(("El perro ", None), ("rojo", "link"), (" come.", None))
    assert docx_written(data, [(0, "The"), (1, " red"), (0, " dog"), (2, " eats.")]) == [
        ("r", "The"),
        ("hyperlink", " red"),
        ("r", " dog"),
        ("r", " eats."),
    ]
    data, placed = held_docx(("Bien ", "link"), ("come", "control")), [(1, "Eat"), (0, " well")]
    assert docx_written(data, placed) == [("sdt", "Eat"), ("hyperlink", " well")]
    saved = docx_saved(data, placed)
    paragraph = docx.Document(io.BytesIO(saved)).paragraphs[0]._p
    assert paragraph.xml.count("<w:temporary/>") == 1  # the copy keeps the properties
    assert paragraph.xml.count('r:id="rId99"') == 1  # and the link its target


def test_a_docx_s_moved_words_leave_no_empty_holder_and_repeat_no_id():
    """The copies of a content control or a revision that words moved by the translation
    go into kept their originals' ids, which ECMA-376 wants unique in the document, and the
    originals stayed, emptied: an empty control shows its placeholder in Word. Now the
    emptied ones go, the first copy of each keeps its id and the others take fresh ones
    above the document's largest; a holder that keeps something else stays, and its copies
    take fresh ids."""
    data = held_docx(("El perro ", None), ("rojo", "insertion"), (" come", "control"), (".", None))
    placed = [(0, "The"), (1, " red"), (0, " dog"), (2, " eats"), (1, " too"), (3, ".")]
    assert docx_written(data, placed) == [
        ("r", "The"),
        ("ins", " red"),
        ("r", " dog"),
        ("sdt", " eats"),
        ("ins", " too"),
        ("r", "."),
    ]
    before, after = docx_ids(data), docx_ids(docx_saved(data, placed))
    assert len(after) == len(set(after)) == len(before) + 1
    assert set(before) < set(after)  # the moved control and insertion keep their ids
    assert int((set(after) - set(before)).pop()) > max(int(i) for i in before)
    document = docx.Document(io.BytesIO(data))  # the insertion also holds a symbol, kept
    paragraph = document.paragraphs[0]._p
    symbol = copy.deepcopy(document.paragraphs[0].runs[0]._r)
    symbol.remove(symbol.find(qn_w("t")))
    symbol.append(symbol.makeelement(qn_w("sym"), {qn_w("char"): "F04A"}))
    paragraph.find(qn_w("ins")).append(symbol)
    mark = {qn_w("id"): "9", qn_w("name"): "here"}  # and the control a bookmark, left in place
    paragraph.find(f"{qn_w('sdt')}/{qn_w('sdtContent')}").append(
        paragraph.makeelement(qn_w("bookmarkStart"), mark)
    )
    out = io.BytesIO()
    document.save(out)
    data = out.getvalue()
    assert docx_written(data, placed)[-2:] == [("ins", ""), ("bookmarkStart", "")]
    before, after = docx_ids(data), docx_ids(docx_saved(data, placed))
    assert len(after) == len(set(after)) == len(before) + 2


def test_an_odt_keeps_its_spans_and_what_sits_between_its_texts():
    document = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    paragraph = text.P(text="El perro ")
    paragraph.addElement(text.Span(stylename=bold, text="come"))
    paragraph.addText(" pan.")
    document.text.addElement(paragraph)
    tabbed = text.P(text="Hola.")
    tabbed.addElement(text.Tab())
    tabbed.addText("Adiós.")
    document.text.addElement(tabbed)
    read = files.read_file(".odt", odf_bytes(document))
    assert [p.runs for p in read.paragraphs] == [
        ["El perro ", "come", " pan."],
        ["Hola.", "\t", "Adiós."],  # one text, the tab a run of its own
    ]
    read.paragraphs[0].write([(0, "The dog"), (1, " eats"), (2, " bread.")])
    read.paragraphs[1].write([(0, "Hello."), (2, " Goodbye.")])
    written = load(io.BytesIO(read.save()))
    first, second = written.getElementsByType(text.P)
    pieces = [
        (c.data, None)
        if isinstance(c, Text)
        else (teletype.extractText(c), c.getAttribute("stylename"))
        for c in first.childNodes
    ]
    assert pieces == [("The dog", None), (" eats", "Bold"), (" bread.", None)]
    kinds = [c.data if isinstance(c, Text) else c.qname[1] for c in second.childNodes]
    assert kinds == ["Hello.", "tab", "Goodbye."]


def test_an_odt_paragraph_s_runs_are_its_texts_spaces_tabs_and_spans():
    """Text and text:s are one run, a span's text another, a tab a run of its own that
    stays; a bookmark parts the runs beside it (whether something stays before each run,
    and after the last)."""
    paragraph = text.P()
    paragraph.addText("El perro")
    paragraph.addElement(text.S(c=2))
    span = text.Span()
    span.addText("come")
    paragraph.addElement(span)
    paragraph.addElement(text.Tab())
    paragraph.addElement(text.Bookmark(name="aquí"))
    paragraph.addText(" pan.")
    runs, parted = _odf_runs(paragraph)
    assert [run.text for run in runs] == ["El perro  ", "come", "\t", " pan."]
    assert [run.kept for run in runs] == [False, False, True, False]
    assert parted == [False, False, False, True, False]


def test_an_odt_translates_links_and_spans_with_spaces_as_runs_of_one_text():
    """A link (text:a) and a span holding a run of spaces (text:s) are runs of their
    paragraph's one text, the link's target kept, as are those beside a tab."""
    document = OpenDocumentText()
    linked = text.P(text="Visite ")
    linked.addElement(text.A(href="https://example.org/", text="nuestro sitio"))
    linked.addText(" hoy.")
    document.text.addElement(linked)
    spaced = text.P(text="Hola ")
    span = text.Span(text="mundo")
    span.addElement(text.S(c=2))
    span.addText("bonito")
    spaced.addElement(span)
    document.text.addElement(spaced)
    tabbed = text.P(text="Nombre:")
    tabbed.addElement(text.Tab())
    tabbed.addElement(text.A(href="https://example.org/ana", text="Ana García"))
    document.text.addElement(tabbed)
    read = files.read_file(".odt", odf_bytes(document))
    assert [p.runs for p in read.paragraphs] == [
        ["Visite ", "nuestro sitio", " hoy."],
        ["Hola ", "mundo  bonito"],
        ["Nombre:", "\t", "Ana García"],
    ]
    read.paragraphs[0].write([(0, "Visit "), (1, "our site"), (2, " today.")])
    read.paragraphs[1].write([(0, "Hello "), (1, "pretty  world")])
    read.paragraphs[2].write([(0, "Name:"), (2, " Ana García")])
    written = load(io.BytesIO(read.save()))
    first, second, third = written.getElementsByType(text.P)
    (link,) = first.getElementsByType(text.A)
    assert teletype.extractText(first) == "Visit our site today."
    assert teletype.extractText(link) == "our site" and "example.org" in str(link.attributes)
    assert teletype.extractText(second) == "Hello pretty  world"
    assert teletype.extractText(third).replace("\t", "") == "Name:Ana García"
    assert third.getElementsByType(text.Tab) and third.getElementsByType(text.A)


def test_a_pptx_keeps_its_runs_breaks_tables_and_notes():
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "Título"
    body = slide.placeholders[1].text_frame
    for words, bold in (("El perro ", False), ("come", True), (" pan.", False)):
        run = body.paragraphs[0].add_run()
        run.text, run.font.bold = words, bold
    broken = body.add_paragraph()
    broken.add_run().text = "Hola."
    broken.add_line_break()
    broken.add_run().text = "Adiós."
    shape = slide.shapes.add_table(1, 1, Inches(1), Inches(4), Inches(2), Inches(1))
    shape.table.cell(0, 0).text = "Buenos días."
    slide.notes_slide.notes_text_frame.text = "Nota"
    out = io.BytesIO()
    presentation.save(out)
    read = files.read_file(".pptx", out.getvalue())
    assert [p.runs for p in read.paragraphs] == [
        ["Título"],
        ["El perro ", "come", " pan."],
        ["Hola.", "\n", "Adiós."],  # a line break between: a run of its own
        ["Buenos días."],
        ["Nota"],
    ]
    read.paragraphs[1].write([(0, "The dog"), (1, " eats"), (2, " bread.")])
    read.paragraphs[2].write([(0, "Hello.\n"), (2, "Goodbye.")])
    for paragraph, value in zip(
        [read.paragraphs[i] for i in (0, 3, 4)],
        ("Title", "Good morning.", "Note"),
        strict=True,
    ):
        paragraph.write([(0, value)])
    written = pptx.Presentation(io.BytesIO(read.save())).slides[0]
    assert written.shapes.title.text == "Title"
    first, second = written.placeholders[1].text_frame.paragraphs
    runs = [(r.text, bool(r.font.bold)) for r in first.runs]
    assert runs == [("The dog", False), (" eats", True), (" bread.", False)]
    assert second.text == "Hello.\vGoodbye."  # python-pptx reads a line break as \v
    table = next(s for s in written.shapes if s.has_table).table
    assert table.cell(0, 0).text == "Good morning."
    assert written.notes_slide.notes_text_frame.text == "Note"


def test_an_odp_is_read_as_an_odt_is():
    document = OpenDocumentPresentation()
    layout = PageLayout(name="Layout")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="Master", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    page = draw.Page(masterpagename=master)
    document.presentation.addElement(page)
    frame = draw.Frame(width="10cm", height="2cm", x="1cm", y="1cm")
    page.addElement(frame)
    box = draw.TextBox()
    frame.addElement(box)
    box.addElement(text.P(text="El perro come pan."))
    read = files.read_file(".odp", odf_bytes(document))
    assert [p.runs for p in read.paragraphs] == [["El perro come pan."]]
    read.paragraphs[0].write([(0, "The dog eats bread.")])
    written = load(io.BytesIO(read.save()))
    assert teletype.extractText(written.getElementsByType(text.P)[0]) == "The dog eats bread."
    with pytest.raises(ValueError, match=r"not an \.odp file"):
        files.read_file(".odp", b"not a zip")


def test_subtitles_keep_their_numbers_timings_and_line_count():
    content = (
        "\ufeff1\r\n00:00:01,000 --> 00:00:02,500\r\nBuenos días,\r\n¿cómo estás?\r\n\r\n"
        "2\r\n00:00:03,000 --> 00:00:04,000\r\nEl perro come pan.\r\n\r\n"
        "3\r\n00:00:05,000 --> 00:00:06,000\r\n\r\n"  # a cue with no text
    )
    read = files.read_file(".srt", content.encode())
    assert [p.runs for p in read.paragraphs] == [
        ["Buenos días, ¿cómo estás?"],
        ["El perro come pan."],
    ]
    read.paragraphs[0].write([(0, "Good morning, how are you?")])
    read.paragraphs[1].write([(0, "The dog eats bread.")])
    assert read.text_format == "plain"
    assert read.save().decode() == (  # the file's line breaks and byte order mark kept
        "\ufeff1\r\n00:00:01,000 --> 00:00:02,500\r\nGood morning,\r\nhow are you?\r\n\r\n"
        "2\r\n00:00:03,000 --> 00:00:04,000\r\nThe dog eats bread.\r\n\r\n"
        "3\r\n00:00:05,000 --> 00:00:06,000\r\n\r\n"
    )


def test_a_dialogue_cue_keeps_a_speaker_a_line_and_its_dashes():
    """A cue whose every line starts with a dash is two (or more) speakers: each line is
    translated on its own and stays on its line after its dash; a dash inside a line, or on
    one line of two, is words like any."""
    content = (
        "1\n00:00:01,000 --> 00:00:02,000\n- Hola.\n- Adiós, mi viejo amigo.\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\n—¿Vienes?\n—Sí.\n\n"
        "3\n00:00:05,000 --> 00:00:06,000\n- Ven aquí\ny siéntate.\n"
    )
    read = files.read_file(".srt", content.encode())
    assert [p.runs for p in read.paragraphs] == [
        ["Hola."],
        ["Adiós, mi viejo amigo."],
        ["¿Vienes?"],
        ["Sí."],
        ["- Ven aquí y siéntate."],
    ]
    english = ["Hi.", "Goodbye, my old friend.", "Are you coming?", "Yes.", "- Come here and sit."]
    for paragraph, said in zip(read.paragraphs, english, strict=True):
        paragraph.write([(0, said)])
    assert read.save().decode() == (
        "1\n00:00:01,000 --> 00:00:02,000\n- Hi.\n- Goodbye, my old friend.\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\n—Are you coming?\n—Yes.\n\n"
        "3\n00:00:05,000 --> 00:00:06,000\n- Come here\nand sit.\n"
    )


def test_subtitles_without_blank_lines_between_and_with_tags():
    content = (
        "1\n00:00:01,000 --> 00:00:02,000\n<i>Hola</i> amigo\n"  # no blank line after
        "2\n00:00:03,000 --> 00:00:04,000\nAdiós"  # nor a last line break
    )
    read = files.read_file(".srt", content.encode())
    assert [p.runs for p in read.paragraphs] == [["<i>Hola</i> amigo"], ["Adiós"]]
    assert read.text_format == "html"  # its tags come back exactly
    read.paragraphs[0].write([(0, "<i>Hello</i> friend")])
    read.paragraphs[1].write([(0, "Goodbye")])
    assert read.save().decode() == (
        "1\n00:00:01,000 --> 00:00:02,000\n<i>Hello</i> friend\n"
        "2\n00:00:03,000 --> 00:00:04,000\nGoodbye"
    )
    untouched = "1\r00:00:01,000 --> 00:00:02,000\r  Hola <Música>\r"  # old Mac line breaks
    read = files.read_file(".srt", untouched.encode())
    assert read.text_format == "plain"  # no subtitle's tag: <Música> is text
    assert read.save().decode() == untouched  # a cue not written: as it was
    tagged = '<font color="#ff0000" face="Arial">Hola</font> amigo mío'
    assert subtitles._lines(tagged, 2) == [
        '<font color="#ff0000" face="Arial">Hola</font>',
        "amigo mío",
    ]


def test_subtitles_with_tags_keep_the_ampersands_and_brackets_of_their_words():
    """A file with one subtitle's tag is read as HTML, and the server escapes the model's
    own words in HTML: "Tom & Jerry" in another cue came back as "TOM &amp; JERRY", "<3"
    as "&lt;3", which a player shows as they are."""
    content = (
        "1\n00:00:01,000 --> 00:00:02,000\n<i>Hola</i> amigo\n\n"
        '2\n00:00:03,000 --> 00:00:04,000\n"Tom" & Jerry <3 si a > b\n'
    )
    read = files.read_file(".srt", content.encode())
    assert read.text_format == "html"
    assert read.paragraphs[1].text == '"Tom" &amp; Jerry &lt;3 si a &gt; b'  # as HTML says it
    for batch in read.batches(64):  # as the server answers HTML: its own words escaped
        said = [
            "".join(
                p if MARKUP.fullmatch(p) else html.escape(p.upper(), quote=False)
                for p in MARKUP.split(text)
            )
            for text in batch.texts
        ]
        batch.write([{"hypotheses": [{"text": text}]} for text in said])
    assert read.save().decode() == content.replace("Hola</i> amigo", "HOLA</i> AMIGO").replace(
        '"Tom" & Jerry <3 si a > b', '"TOM" & JERRY <3 SI A > B'
    )


def test_a_text_file_is_its_blocks_between_blank_lines_a_long_one_in_pieces():
    """Blocks between blank lines; a block longer than a text may be (a file of line breaks
    alone, a paragraph of 150,000 characters) cut into pieces at line breaks, else at
    sentence ends, else at spaces: every piece a text the server takes."""
    content = "Hola.\nAdiós.\n\n  \nBuenos días.\n" + "Uno. " * 30_000
    read = files.read_file(".txt", content.encode())
    runs = [p.runs[0] for p in read.paragraphs]
    assert runs[0] == "Hola.\nAdiós." and runs[1] == "Buenos días.\n"
    assert "".join(runs[1:]) == "Buenos días.\n" + "Uno. " * 30_000
    assert all(len(r) <= files.HTML_PIECE and r.endswith("Uno. ") for r in runs[2:-1])
    for i, paragraph in enumerate(read.paragraphs):
        paragraph.write([(0, ["Hello.\nGoodbye.", "Good morning.\n"][i] if i < 2 else "One. ")])
    assert read.save().decode() == "Hello.\nGoodbye.\n\n  \nGood morning.\n" + "One. " * (
        len(runs) - 2
    )
    lines = "\n".join(f"Línea {i}." for i in range(3_000))  # no blank line: one block
    pieces = [p.runs[0] for p in files.read_file(".txt", lines.encode(), 1_000).paragraphs]
    assert "".join(pieces) == lines and all(p.endswith(".\n") for p in pieces[:-1])
    assert max(map(len, pieces)) <= 1_000 and len(pieces) > 20
    words = "palabra " * 400  # no sentence end: cut after a space
    assert documents.pieces(words, 1_000) == ["palabra " * 125] * 3 + ["palabra " * 25]
    assert documents.pieces("x" * 2_500, 1_000) == ["x" * 1_000] * 2 + ["x" * 500]


@pytest.mark.parametrize("suffix", [".txt", ".html", ".srt"])
@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-8"])
def test_a_text_file_is_written_back_in_its_encoding_its_byte_order_mark_kept_out(suffix, encoding):
    """A byte order mark (Windows' editors write one; Notepad's "Unicode" is UTF-16) is not
    a word to translate: it is kept out of the paragraphs, and the file is written back in
    its encoding with it."""
    content = {
        ".txt": "Buenos días.\r\n",
        ".html": "<p>Buenos días.</p>",
        ".srt": "1\r\n00:00:01,000 --> 00:00:02,000\r\nBuenos días.\r\n",
    }[suffix]

    def encoded(text: str) -> bytes:
        bom = codecs.BOM_UTF16_BE if encoding == "utf-16-be" else b""
        return bom + text.encode(encoding)

    data = encoded(content)
    read = files.read_file(suffix, data)
    (paragraph,) = read.paragraphs
    assert "\ufeff" not in paragraph.runs[0] and "Buenos días." in paragraph.runs[0]
    paragraph.write([(0, paragraph.runs[0].replace("Buenos días", "Good morning"))])
    assert read.save() == encoded(content.replace("Buenos días", "Good morning"))


def test_an_epub_is_its_xhtml_read_as_html_the_rest_kept():
    read = files.read_file(".epub", epub())
    assert read.text_format == "html"
    assert [p.runs for p in read.paragraphs] == [[CHAPTER]]
    read.paragraphs[0].write([(0, CHAPTER.replace("Uno", "One").replace("El perro", "The dog"))])
    written = zipfile.ZipFile(io.BytesIO(read.save()))
    first = written.infolist()[0]
    assert first.filename == "mimetype" and first.compress_type == zipfile.ZIP_STORED
    assert written.read("OEBPS/cover.png") == b"\x89PNG not really"
    chapter = written.read("OEBPS/text/capítulo.xhtml").decode()
    assert "The dog <b>come</b>" in chapter and "<title>One</title>" in chapter
    ElementTree.fromstring(chapter.encode())  # still XML
    for broken in (b"not a zip", epub().replace(b"META-INF/container.xml", b"META-INF/other.xml")):
        with pytest.raises(ValueError, match=r"not an \.epub file"):
            files.read_file(".epub", broken)


def test_html_is_never_cut_inside_a_script_or_a_comment():
    script = "<script>var a = '<p>x</p>';</script><!-- <div>y</div> -->"
    content = script + "<p>Uno.</p><p>Dos.</p>"
    pieces = html_pieces(content, 10)
    assert pieces[0] == script + "<p>Uno.</p>" and "".join(pieces) == content
    unclosed = "<p>Uno.</p><script>var a = '</p>"  # a script to the end, as a browser reads it
    assert html_pieces(unclosed, 5) == ["<p>Uno.</p>", "<script>var a = '</p>"]


@pytest.mark.parametrize("br", ["<br>", "<BR>", "<br/>", '<br class="x">', "<br\nclear=all />"])
def test_a_long_block_is_cut_after_its_line_breaks_whatever_their_attributes(br):
    """Only a bare <br> (or <br/>) was a cut: `<br class="x">` was not."""
    lines = "<div>" + "".join(f"Línea {i}.{br}" for i in range(12)) + "</div>"
    pieces = html_pieces(lines, 60)
    assert "".join(pieces) == lines and len(pieces) > 2
    assert all(p.endswith(br) for p in pieces[:-1]), pieces


def test_html_is_never_cut_inside_a_tag_whose_value_holds_a_block_end_or_a_line_break():
    """A `</p>` or `<br>` inside a quoted attribute value cut the piece there, inside the
    tag: each half went to the model as words and the link came back broken."""
    for inside in ("<br>", "</p>"):
        tag = f'<a title="uno{inside}dos" href="/x">'
        content = f"<div>{'Hola. ' * 8}{tag}{'Hola. ' * 8}</a><br>Adiós.</div><p>Fin.</p>"
        pieces = html_pieces(content, 60)
        assert "".join(pieces) == content and any(tag in p for p in pieces), pieces


def test_a_long_html_file_is_cut_after_blocks_into_texts_of_a_bounded_length():
    body = "".join(f"<p>Frase {i}.</p>" for i in range(10))
    content = f"<html><body>{body}</body></html>"
    pieces = html_pieces(content, 40)
    assert "".join(pieces) == content and max(len(p) for p in pieces) <= 40
    assert all(p.endswith("</p>") for p in pieces[:-1]) and len(pieces) == 6
    assert html_pieces("<p>" + "x" * 100 + "</p><p>y</p>", 40) == [
        "<p>" + "x" * 100 + "</p>",  # a block longer than the bound is a piece of its own
        "<p>y</p>",
    ]
    lines = "<div>" + "".join(f"Línea {i}.<br>" for i in range(12)) + "</div><p>y</p>"
    pieces = html_pieces(lines, 40)  # a block too long, cut after its line breaks
    assert "".join(pieces) == lines and max(len(p) for p in pieces) <= 40
    assert all(p.endswith(("<br>", "</div>")) for p in pieces[:-1]) and pieces[-1] == "<p>y</p>"
    long = "<div>" + "<p>Hola.</p>" * 5_000 + "<p>  </p></div>"
    read = files.read_file(".html", long.encode())
    assert len(read.paragraphs) == 4 and all(  # 60,020 characters
        len(p.text) <= files.HTML_PIECE for p in read.paragraphs
    )
    for paragraph in read.paragraphs:
        paragraph.write([(0, paragraph.text.replace("Hola", "Hello"))])
    assert read.save().decode() == long.replace("Hola", "Hello")


def test_xhtml_is_cut_after_its_prefixed_block_ends_and_line_breaks():
    """`</h:p>` and `<h:br/>` (h bound to XHTML's namespace) ended no block: a long file
    went whole to one text, past the bound."""
    body = "".join(f"<h:p>Frase {i}.</h:p>" for i in range(10))
    content = f'<h:html xmlns:h="http://www.w3.org/1999/xhtml"><h:body>{body}</h:body></h:html>'
    pieces = html_pieces(content, 80)
    assert "".join(pieces) == content and max(len(p) for p in pieces) <= 80
    assert all(p.endswith("</h:p>") for p in pieces[:-1]) and len(pieces) > 2
    lines = "<h:div>" + "".join(f"Línea {i}.<h:br/>" for i in range(12)) + "</h:div>"
    pieces = html_pieces(lines, 60)
    assert "".join(pieces) == lines and all(p.endswith("<h:br/>") for p in pieces[:-1])


def test_html_is_one_paragraph_and_other_files_are_refused():
    read = files.read_file(".html", b"<p>Hola</p>")
    assert read.text_format == "html" and read.paragraphs[0].runs == ["<p>Hola</p>"]
    read.paragraphs[0].write([(0, "<p>Hello</p>")])
    assert read.save() == b"<p>Hello</p>"
    refused = ((".docx", b"not a zip"), (".pptx", b"no"), (".odt", b"nor this"), (".pdf", b"%PDF"))
    for suffix, data in refused:
        with pytest.raises(ValueError):
            files.read_file(suffix, data)


def test_a_zip_whose_file_unpacks_to_more_than_its_header_says_is_refused():
    book, out = zipfile.ZipFile(io.BytesIO(epub())), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zipped:
        for entry in book.infolist():
            body = b"x" * 100_000 if entry.filename == "OEBPS/cover.png" else book.read(entry)
            zipped.writestr(entry, body)
    data = bytearray(out.getvalue())
    assert files.read_file(".epub", bytes(data)).paragraphs  # as its headers say: read
    # its local and central headers say the image unpacks to 10 bytes, not 100,000
    name = b"OEBPS/cover.png"
    local, central = data.find(name) - 30 + 22, data.rfind(name) - 46 + 24
    for at in (local, central):
        data[at : at + 4] = (10).to_bytes(4, "little")
    with pytest.raises(ValueError, match=r"not an \.epub file"):
        files.read_file(".epub", bytes(data))
    encrypted = bytearray(epub())
    at = encrypted.find(b"PK\x01\x02", encrypted.find(b"OEBPS/cover.png") - 60)
    encrypted[at + 8] |= 1  # the central header's flag: encrypted
    with pytest.raises(ValueError, match=r"not an \.epub file"):
        files.read_file(".epub", bytes(encrypted))


def test_a_zip_of_too_many_files_or_an_unreadable_compression_is_refused(monkeypatch):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_LZMA) as zipped:
        zipped.writestr("content.xml", b"x" * 10_000)
    data = bytearray(out.getvalue())
    name = data.find(b"content.xml")
    at = name + len(b"content.xml") + 20  # inside the packed data, past lzma's header
    data[at : at + 8] = b"\xff" * 8
    with pytest.raises(ValueError, match=r"not an \.odt file"):
        files.read_file(".odt", bytes(data))
    monkeypatch.setattr(archive, "ZIPPED_FILES", 3)
    with pytest.raises(ValueError, match=r"\.epub: more than 3 files"):
        files.read_file(".epub", epub())


def test_a_pptx_whose_notes_slide_has_no_body_is_read():
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "Hola"
    notes = slide.notes_slide
    body = notes.notes_placeholder
    body._element.getparent().remove(body._element)  # a notes slide without its body
    assert slide.notes_slide.notes_text_frame is None
    out = io.BytesIO()
    presentation.save(out)
    assert [p.runs for p in files.read_file(".pptx", out.getvalue()).paragraphs] == [["Hola"]]


def test_a_zipped_file_that_unpacks_too_large_is_refused_before_it_is_read(monkeypatch):
    document = docx.Document()
    document.add_paragraph("Hola. " * 400)
    out = io.BytesIO()
    document.save(out)
    assert files.read_file(".docx", out.getvalue()).paragraphs  # read within the bound
    monkeypatch.setattr(archive, "UNPACKED_BYTES", 2_000)  # a bound its parts pass
    for suffix, data in ((".docx", out.getvalue()), (".epub", epub(CHAPTER * 10))):
        with pytest.raises(ValueError, match=rf"\{suffix}: more than"):
            files.read_file(suffix, data)


def spaced_odt(*counts: str | None) -> bytes:
    """An .odt of one paragraph, "Hola", a text:s of each count (None: no text:c), "amigo."."""
    document = OpenDocumentText()
    paragraph = text.P(text="Hola")
    for count in counts:
        spaces = text.S()
        if count is not None:
            spaces.setAttribute("c", count)
        paragraph.addElement(spaces)
    paragraph.addText("amigo.")
    document.text.addElement(paragraph)
    return odf_bytes(document)


def odf_bytes(document) -> bytes:
    """An odfpy document as its file's bytes."""
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()


def test_an_odt_whose_spaces_come_to_more_than_an_archive_unpacks_is_refused():
    """A text:s stands for text:c spaces: a file of 1.4 KB whose c was 2,000,000,000 was
    read as gigabytes of text before a sentence's length refused it, and a c that is no
    number was int()'s error."""
    assert [p.text for p in files.read_file(".odt", spaced_odt("3", None)).paragraphs] == [
        "Hola    amigo."
    ]
    half = str(archive.UNPACKED_BYTES // 2 + 1)  # each within the bound, the two past it
    with pytest.raises(ValueError, match=r"^\.odt: spaces \(text:s\) for more than 256 MiB$"):
        files.read_file(".odt", spaced_odt(half, half))
    for count in ("x", "-3", "²"):
        with pytest.raises(ValueError, match=rf'^\.odt: text:s c="{count}" is not a number'):
            files.read_file(".odt", spaced_odt(count))


def test_a_library_failing_on_a_part_it_opened_is_a_file_it_cannot_read(monkeypatch):
    import docx.document

    document = docx.Document()
    document.add_paragraph("Hola.")
    out = io.BytesIO()
    document.save(out)

    def broken(self):
        raise KeyError("rId9")  # as python-docx raises for a relationship a part lacks

    monkeypatch.setattr(docx.document.Document, "sections", property(broken))
    with pytest.raises(ValueError, match=r"not a \.docx file \('rId9'\)"):
        files.read_file(".docx", out.getvalue())


def test_html_pieces_follow_the_length_asked_for():
    content = "<p>Uno.</p>" * 10
    assert len(files.read_file(".html", content.encode()).paragraphs) == 1
    assert len(files.read_file(".html", content.encode(), piece=30).paragraphs) == 5


def test_parts_translations_are_joined_each_span_moved_to_where_its_part_lies():
    """A paragraph sent in parts comes back as one translation: each part's text without the
    tags the part added, its spans moved to its place, a part of white space its own
    translation, a part's one sentence aligned by its hypothesis' alignment."""
    parts = [markup.Part("Hola ", closed="</b>"), markup.Part("  "), markup.Part("amigo.", "<b>")]
    alignment = {"sourceTokens": ["▁amigo", "."], "targetTokens": ["▁friend", "."]}
    translations = [
        {"hypotheses": [{"text": "Hello </b>"}], "sentences": [{"sourceEnd": 9, "targetEnd": 10}]},
        None,
        {"hypotheses": [{"text": "<b>friend.", "alignment": alignment}]},
    ]
    assert joined(parts, translations) == {
        "hypotheses": [{"text": "Hello   friend."}],
        "sentences": [
            {"sourceStart": 0, "sourceEnd": 5, "targetStart": 0, "targetEnd": 6},
            {
                "sourceStart": 7,
                "sourceEnd": 13,
                "targetStart": 8,
                "targetEnd": 15,
                "alignment": alignment,
            },
        ],
    }
    assert joined(parts[:1], translations[:1]) is translations[0]  # one part: as it came


def test_a_paragraph_past_the_text_limit_goes_in_parts_cut_after_sentences():
    """A paragraph longer than a text may be was sent whole, and the server refused the
    whole document for it."""
    document = docx.Document()
    paragraph = document.add_paragraph("El perro ")
    paragraph.add_run("come").bold = True
    paragraph.add_run(" pan. La casa es grande. El sol ")
    paragraph.add_run("sale").bold = True
    paragraph.add_run(" hoy. Buenos días.")
    document.add_paragraph("Adiós.")
    out = io.BytesIO()
    document.save(out)
    read = files.read_file(".docx", out.getvalue(), piece=40)
    batches = list(read.batches(1))  # a call a text: the first paragraph takes two
    assert [batch.texts for batch in batches] == [
        ["El perro come pan. La casa es grande. "],
        ["El sol sale hoy. Buenos días."],
        ["Adiós."],
    ]
    assert [len(batch.paragraphs) for batch in batches] == [0, 1, 1]  # with its last part
    assert [batch.aligned for batch in batches] == [True, True, False]
    for batch in batches:
        batch.write([upper_cased(text) for text in batch.texts])
    written = docx.Document(io.BytesIO(read.save()))
    assert [p.text for p in written.paragraphs] == [
        "EL PERRO COME PAN. LA CASA ES GRANDE. EL SOL SALE HOY. BUENOS DÍAS.",
        "ADIÓS.",
    ]
    bold = [r.text for r in written.paragraphs[0].runs if r.bold]
    assert bold == [" COME", " SALE"]


def test_a_paragraph_with_a_sentence_past_the_text_limit_is_refused_by_its_number():
    document = docx.Document()
    document.add_paragraph("Hola.")
    document.add_paragraph("Una frase muy larga " * 3 + "sin fin. Adiós.")
    out = io.BytesIO()
    document.save(out)
    assert len(files.read_file(".docx", out.getvalue(), piece=80).paragraphs) == 2
    said = r'paragraph 2 \("Una frase muy larga Una frase muy larga\.\.\."\): a sentence longer'
    with pytest.raises(ValueError, match=said + " than 40 characters"):
        files.read_file(".docx", out.getvalue(), piece=40)
    html = b"<p>Hola. <b>Una frase muy larga que no termina</b> nunca.</p>"
    with pytest.raises(
        ValueError, match=r'paragraph 1 \("Hola\. Una frase muy larga que no termina\.\.\."'
    ):
        files.read_file(".html", html, piece=40)


def test_an_odt_heading_is_numbered_where_it_sits_among_the_paragraphs():
    """An .odt's headings were read after all its paragraphs, so the heading second in the
    document was "paragraph 3" in the error that refused it."""
    document = OpenDocumentText()
    document.text.addElement(text.P(text="Hola."))
    document.text.addElement(text.H(outlinelevel=1, text="Una frase muy larga " * 3 + "sin fin."))
    section = text.Section(name="Fin")  # a heading inside a section, after it a paragraph
    section.addElement(text.H(outlinelevel=2, text="Adiós."))
    document.text.addElement(section)
    document.text.addElement(text.P(text="Gracias."))
    read = files.read_file(".odt", odf_bytes(document))
    long = "Una frase muy larga " * 3 + "sin fin."
    assert [p.text for p in read.paragraphs] == ["Hola.", long, "Adiós.", "Gracias."]
    said = r'paragraph 2 \("Una frase muy larga Una frase muy larga\.\.\."\): a sentence longer'
    with pytest.raises(ValueError, match=said):
        files.read_file(".odt", odf_bytes(document), piece=40)


def test_a_paragraph_of_invisible_characters_alone_is_kept_not_sent():
    """A paragraph of a zero-width space or a direction mark (as pasted text leaves) was
    sent, and the server refused the whole file: "texts[1]: empty or only white space"."""
    from service.runtime.requests import check_texts

    document = docx.Document()
    for written in ("Hola.", "\u200b", "\u200e ", "Adiós."):
        document.add_paragraph(written)
    out = io.BytesIO()
    document.save(out)
    cues = (
        "1\n00:00:01,000 --> 00:00:02,000\n\u200b\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\n- Hola.\n- \u00ad\n"
    )
    sent = {
        ".docx": out.getvalue(),
        ".txt": "Hola.\n\n\ufeff\u200b\n\nAdiós.".encode(),
        ".srt": cues.encode(),
        ".html": "<p>Hola.</p><p>\u200b</p>".encode(),
    }
    for suffix, data in sent.items():
        read = files.read_file(suffix, data)
        texts = [text for batch in read.batches(64) for text in batch.texts]
        problems: list[str] = []
        check_texts([f"texts[{i}]" for i in range(len(texts))], texts, problems, 100_000)
        assert problems == [], suffix
        for batch in read.batches(64):
            batch.write([upper_cased(text) for text in batch.texts])
        if suffix == ".docx":
            written = docx.Document(io.BytesIO(read.save()))
            assert [p.text for p in written.paragraphs] == ["HOLA.", "\u200b", "\u200e ", "ADIÓS."]
        elif suffix == ".srt":
            assert read.save().decode() == cues.replace("- Hola.", "- HOLA.")


def test_a_docx_header_two_sections_name_is_read_once():
    """Two sections may name one header's part: its paragraphs were read twice, and writing
    the second time failed (AttributeError), a server error for the whole file."""
    from docx.enum.section import WD_SECTION

    document = docx.Document()
    document.add_paragraph("Uno.")
    document.sections[0].header.paragraphs[0].text = "Cabecera"
    document.add_section(WD_SECTION.NEW_PAGE)
    document.add_paragraph("Dos.")
    first, second = document.sections
    reference = first._sectPr.find(qn_w("headerReference"))
    second._sectPr.insert(0, copy.deepcopy(reference))  # the same header's part
    out = io.BytesIO()
    document.save(out)
    read = files.read_file(".docx", out.getvalue())
    assert [p.runs for p in read.paragraphs] == [["Uno."], ["Dos."], ["Cabecera"]]
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    written = docx.Document(io.BytesIO(read.save()))
    assert [section.header.paragraphs[0].text for section in written.sections] == ["CABECERA"] * 2


LONG_HTML = (
    '<p>El perro <b>come pan. La casa</b> es grande. Mira <a href="https://a.com/x?y=1&amp;z=2">'
    'este enlace. Es bueno</a> y <span class="x">útil. Buenos días.</span> Adiós.</p>'
)
MARKUP = re.compile(f"({markup.TAG}|{markup.ENTITY})")


def shouted(text: str) -> str:
    """An HTML text translated as the server does (markup outside its sentences kept as it
    is), each sentence's words upper-cased, its tags and entities as they are."""
    document = markup.split_markup(text, "sentences", "html")
    said = [
        "".join(p if MARKUP.fullmatch(p) else p.upper() for p in MARKUP.split(s) if p)
        for s in document.sentence_texts()
    ]
    return document.join(said)[0]


@pytest.mark.parametrize("suffix", [".html", ".epub"])
def test_an_html_block_past_the_text_limit_goes_in_parts_with_its_tags(suffix):
    """An HTML block longer than a text may be, with no <br> in it, was sent whole, and the
    server refused the whole file for it."""
    page = f"<html><body><h1>Título</h1>{LONG_HTML}<p>Fin.</p></body></html>"
    if suffix == ".epub":
        page = CHAPTER.replace("<p>El perro <b>come</b> pan.</p>", LONG_HTML)
    read = files.read_file(suffix, epub(page) if suffix == ".epub" else page.encode(), piece=100)
    texts = [text for batch in read.batches(64) for text in batch.texts]
    assert len(texts) > len(read.paragraphs) and all(len(text) <= 100 for text in texts)
    assert LONG_HTML in "".join(texts).replace('</span><span class="x">', "")
    for batch in read.batches(2):
        batch.write([{"hypotheses": [{"text": shouted(text)}]} for text in batch.texts])
    saved = read.save()
    if suffix == ".epub":
        saved = zipfile.ZipFile(io.BytesIO(saved)).read("OEBPS/text/capítulo.xhtml")
        ElementTree.fromstring(saved)  # still XML
    assert saved.decode() == shouted(page)  # as if translated whole: every tag once, in place


def test_an_xhtml_cdata_section_is_translated_an_html_one_is_left():
    """An EPUB chapter's CDATA section (XML: text) was read as markup holding no text and
    stayed Spanish; it is translated, written back escaped, and the one in a script stays.
    In an HTML file it is a bogus comment, left as it is."""
    script = "<script>//<![CDATA[\nif (a < b) {}\n//]]></script>"
    page = CHAPTER.replace("<title>Uno</title>", f"<title>Uno</title>{script}").replace(
        "<p>El perro <b>come</b> pan.</p>", "<p><![CDATA[Tom & Jerry comen pan.]]></p>"
    )
    read = files.read_file(".epub", epub(page))
    for batch in read.batches(64):
        batch.write([{"hypotheses": [{"text": shouted(text)}]} for text in batch.texts])
    chapter = zipfile.ZipFile(io.BytesIO(read.save())).read("OEBPS/text/capítulo.xhtml")
    assert f"<title>UNO</title>{script}" in chapter.decode()
    body = ElementTree.fromstring(chapter).find("{http://www.w3.org/1999/xhtml}body")
    assert body[0].text == "TOM & JERRY COMEN PAN."  # escaped in the file: still XML
    html_page = "<p><![CDATA[Tom y Jerry.]]></p><p>Hola.</p>"
    read = files.read_file(".html", html_page.encode())
    for batch in read.batches(64):
        batch.write([{"hypotheses": [{"text": shouted(text)}]} for text in batch.texts])
    assert read.save().decode() == "<p><![CDATA[Tom y Jerry.]]></p><p>HOLA.</p>"


def test_html_parts_translated_by_the_runtime_come_back_with_their_tags(tiny_translator):
    from service.runtime.decoding import DecodingOptions
    from service.runtime.onnx_engine import OnnxEngine
    from service.runtime.tokenizer import Tokenizer
    from service.runtime.translation import translate_documents

    engine = OnnxEngine(tiny_translator[1], "fp32")
    tokenizer = Tokenizer(SHIPPED_TRANSLATOR / "tokenizer.model")
    read = files.read_file(".html", LONG_HTML.encode(), piece=100)
    for batch in read.batches(64):
        assert len(batch.texts) > 1 and all(len(text) <= 100 for text in batch.texts)
        said = translate_documents(
            engine, tokenizer, batch.texts, DecodingOptions(max_length=8), 64, text_format="html"
        )
        batch.write([{"hypotheses": [{"text": text}]} for text in said])
    written = read.save().decode()
    assert markup.well_formed(written), written
    assert MARKUP.findall(written) == MARKUP.findall(LONG_HTML)


def made(suffix: str) -> bytes:
    """A small file of `suffix` holding the paragraph "Hola mundo."."""
    out = io.BytesIO()
    if suffix == ".docx":
        document = docx.Document()
        document.add_paragraph("Hola mundo.")
        document.save(out)
    elif suffix == ".pptx":
        deck = pptx.Presentation()
        deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = "Hola mundo."
        deck.save(out)
    elif suffix == ".odt":
        document = OpenDocumentText()
        document.text.addElement(text.P(text="Hola mundo."))
        document.write(out)
    else:
        return epub(CHAPTER.replace("El perro <b>come</b> pan.", "Hola mundo."))
    return out.getvalue()


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".odt", ".epub"])
def test_a_translation_with_characters_xml_cannot_hold_is_written_without_them(suffix):
    """The translator's byte pieces can give control characters: python-docx refused them
    (a ValueError out of the write, a 500 over HTTP) and an .epub's XHTML took them and was
    no longer XML."""
    read = files.read_file(suffix, made(suffix))
    for batch in read.batches(64):
        said = [text.replace("Hola", "Ho\x0bla\x00\ufffe") for text in batch.texts]
        batch.write([{"hypotheses": [{"text": text}]} for text in said])
    saved = read.save()
    if suffix == ".docx":
        written = [p.text for p in docx.Document(io.BytesIO(saved)).paragraphs]
    elif suffix == ".pptx":
        slide = pptx.Presentation(io.BytesIO(saved)).slides[0]
        written = [slide.shapes.title.text]
    elif suffix == ".odt":
        paragraphs = load(io.BytesIO(saved)).getElementsByType(text.P)
        written = [teletype.extractText(p) for p in paragraphs]
    else:
        chapter = zipfile.ZipFile(io.BytesIO(saved)).read("OEBPS/text/capítulo.xhtml")
        written = ["".join(ElementTree.fromstring(chapter).itertext())]
    assert any("Hola mundo." in w for w in written), written


def test_an_html_file_of_unclosed_brackets_is_read_at_once():
    """Whether a piece held words was read by taking out `<[^>]*>`, which from each "<"
    with no ">" after it read to the text's end: 3 s for 100 KB of "<", minutes for an
    upload of a few megabytes, on a thread of the front."""

    def refused(length: int) -> None:
        with pytest.raises(ValueError, match="a sentence longer than 20000 characters"):
            files.read_file(".html", ("<p>Hola.</p>" + "<" * length).encode())

    assert growth(refused, 25_000, 100_000) < 8  # linear: about 4
    content = "<p>Hola.</p>" + "<" * 100_000
    read = files.read_file(".html", content.encode(), piece=200_000)
    assert [p.text for p in read.paragraphs] == [content]
    empty = files.read_file(".html", b"<p><img src='a.png'></p><!-- x -->")
    assert not empty.paragraphs  # no words: kept as it is


W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
NOTES = {"footnotes": "w:footnote", "endnotes": "w:endnote"}  # a part -> its notes' element


def run(words: str, bold: bool = False) -> str:
    """A WordprocessingML run of `words`."""
    formatting = "<w:rPr><w:b/></w:rPr>" if bold else ""
    return f"<w:r>{formatting}<w:t xml:space='preserve'>{words}</w:t></w:r>"


def text_box(words: str) -> str:
    """A run holding a text box as Word writes it: DrawingML, and VML for older readers."""
    content = f"<w:txbxContent><w:p>{run(words)}</w:p></w:txbxContent>"
    return (
        "<w:r><mc:AlternateContent><mc:Choice Requires='wps'><w:drawing><wps:txbx>"
        f"{content}</wps:txbx></w:drawing></mc:Choice><mc:Fallback><w:pict><v:shape>"
        f"<v:textbox>{content}</v:textbox></v:shape></w:pict></mc:Fallback>"
        "</mc:AlternateContent></w:r>"
    )


def docx_of(body: str, notes: dict[str, list[str]]) -> bytes:
    """A .docx whose body ends with the XML `body`, with footnotes and endnotes (`notes`:
    each part's notes' paragraphs' XML, after the two separators Word writes)."""
    document = docx.Document()
    document.add_comment(document.add_paragraph("Comentado.").runs, text="Un comentario.")
    out = io.BytesIO()
    document.save(out)
    source = zipfile.ZipFile(io.BytesIO(out.getvalue()))
    written = io.BytesIO()
    added = {  # a file -> (where, what goes before it)
        "word/document.xml": ("<w:sectPr", body),
        "[Content_Types].xml": (
            "</Types>",
            "".join(
                f'<Override PartName="/word/{part}.xml" ContentType="application/'
                f'vnd.openxmlformats-officedocument.wordprocessingml.{part}+xml"/>'
                for part in notes
            ),
        ),
        "word/_rels/document.xml.rels": (
            "</Relationships>",
            "".join(
                f'<Relationship Id="rId{part}" Type="http://schemas.openxmlformats.org/'
                f'officeDocument/2006/relationships/{part}" Target="{part}.xml"/>'
                for part in notes
            ),
        ),
    }
    with zipfile.ZipFile(written, "w") as zipped:
        for name in source.namelist():
            data = source.read(name)
            if name in added:
                where, what = added[name]
                data = data.decode().replace(where, what + where)
            zipped.writestr(name, data)
        for part, paragraphs in notes.items():
            note = NOTES[part]
            separators = "".join(
                f'<{note} w:type="{kind}" w:id="{i}"><w:p><w:r><w:separator/></w:r></w:p></{note}>'
                for i, kind in ((-1, "separator"), (0, "continuationSeparator"))
            )
            said = "".join(f'<{note} w:id="{i}">{p}</{note}>' for i, p in enumerate(paragraphs, 1))
            zipped.writestr(f"word/{part}.xml", f"<w:{part} {W}>{separators}{said}</w:{part}>")
    return written.getvalue()


def test_a_docx_reads_content_controls_text_boxes_notes_comments_and_insertions():
    """python-docx's paragraphs leave out a content control's (a cover page's, a form
    field's), a text box's, a tracked insertion's, and footnotes, endnotes and comments are
    parts of their own: all that text stayed untranslated. A text box is read once (Word
    writes it twice, DrawingML and VML) and written to both."""
    body = (
        f"<w:sdt><w:sdtPr/><w:sdtContent><w:p>{run('Informe anual.')}</w:p></w:sdtContent></w:sdt>"
        f"<w:p>{run('Escriba ')}<w:sdt><w:sdtContent>{run('su nombre', True)}</w:sdtContent>"
        f"</w:sdt>{run(' aquí.')}</w:p>"
        f"<w:p>{run('Una caja:')}{text_box('Texto en una caja.')}</w:p>"
        f"<w:p>{run('Frase ')}<w:ins w:id='1' w:author='A' w:date='2024-01-01T00:00:00Z'>"
        f"{run('insertada.')}</w:ins><w:del w:id='2' w:author='A' w:date='2024-01-01T00:00:00Z'>"
        "<w:r><w:delText>borrada</w:delText></w:r></w:del></w:p>"
        f"<w:p>{run('Con nota.')}<w:r><w:footnoteReference w:id='1'/></w:r></w:p>"
        f"<w:tbl><w:tr><w:tc><w:tbl><w:tr><w:tc><w:p>{run('Celda de una tabla anidada.')}</w:p>"
        "</w:tc></w:tr></w:tbl><w:p/></w:tc></w:tr></w:tbl>"
    )
    notes = {
        "footnotes": [f"<w:p>{run('Una nota al pie.')}</w:p>"],
        "endnotes": [f"<w:p>{run('Una nota final.')}</w:p>"],
    }
    read = files.read_file(".docx", docx_of(body, notes))
    assert [p.runs for p in read.paragraphs] == [
        ["Comentado."],
        ["Informe anual."],
        ["Escriba ", "su nombre", " aquí."],
        ["Una caja:"],
        ["Texto en una caja."],
        ["Frase ", "insertada."],
        ["Con nota."],
        ["Celda de una tabla anidada."],
        ["Una nota al pie."],
        ["Una nota final."],
        ["Un comentario."],
    ]
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    saved = zipfile.ZipFile(io.BytesIO(read.save()))
    main = saved.read("word/document.xml").decode()
    for said in ("INFORME ANUAL.", "ESCRIBA", " AQUÍ.", "FRASE", "borrada", "ANIDADA."):
        assert said in main, said
    assert re.search(r"<w:ins [^>]*><w:r><w:t[^>]*> INSERTADA\.<", main)
    assert main.count("TEXTO EN UNA CAJA.") == 2 and "Texto en" not in main
    assert "UNA NOTA AL PIE." in saved.read("word/footnotes.xml").decode()
    assert "UNA NOTA FINAL." in saved.read("word/endnotes.xml").decode()
    assert "UN COMENTARIO." in saved.read("word/comments.xml").decode()
    assert re.search(r"<w:sdtContent><w:r><w:rPr><w:b/></w:rPr><w:t[^>]*> SU NOMBRE<", main)
    assert "UNA CAJA:" in main


def field(kind: str) -> str:
    return f"<w:r><w:fldChar w:fldCharType='{kind}'/></w:r>"


def toc_entry(words: str, page: int) -> str:
    """A table of contents' entry as Word writes it: a link to the heading, a tab, and the
    heading's page number (a PAGEREF field)."""
    return (
        f"<w:hyperlink w:anchor='_Toc{page}'>{run(words)}<w:r><w:tab/></w:r>{field('begin')}"
        f"<w:r><w:instrText> PAGEREF _Toc{page} \\h </w:instrText></w:r>{field('separate')}"
        f"{run(str(page))}{field('end')}</w:hyperlink>"
    )


def test_a_docx_table_of_contents_is_translated_entry_by_entry_its_codes_kept():
    """A table of contents is one field from its first entry's paragraph to its last: its
    first entry was read as inside a field and stayed in Spanish, the others translated."""
    toc = f'{field("begin")}<w:r><w:instrText> TOC \\o "1-3" \\h </w:instrText></w:r>'
    body = (
        "<w:sdt><w:sdtPr><w:docPartObj><w:docPartGallery w:val='Table of Contents'/>"
        f"</w:docPartObj></w:sdtPr><w:sdtContent>"
        f"<w:p>{toc}{field('separate')}{toc_entry('Introducción', 1)}</w:p>"
        f"<w:p>{toc_entry('Conclusiones', 2)}</w:p><w:p>{field('end')}</w:p>"
        "</w:sdtContent></w:sdt>"
    )
    read = files.read_file(".docx", docx_of(body, {}))
    assert [p.runs for p in read.paragraphs][1:3] == [
        ["Introducción", "\t"],
        ["Conclusiones", "\t"],
    ]
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    main = zipfile.ZipFile(io.BytesIO(read.save())).read("word/document.xml").decode()
    assert "INTRODUCCIÓN" in main and "CONCLUSIONES" in main
    assert ' TOC \\o "1-3" \\h ' in main and main.count("PAGEREF") == 2
    assert re.findall(r"<w:t[^>]*>(\d)</w:t>", main) == ["1", "2"]


def test_an_odt_paragraph_with_tabs_breaks_bookmarks_and_notes_is_one_text():
    """A paragraph holding a bookmark, a soft page break, a tab, a line break or a note was
    translated a piece of text at a time (a sentence cut in two, a span's formatting given
    to a piece of its own); it is one text of runs, those elements kept where they stand."""
    document = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    paragraph = text.P(text="El perro ")
    paragraph.addElement(text.BookmarkStart(name="perro"))
    paragraph.addElement(text.Span(stylename=bold, text="come"))
    paragraph.addElement(text.BookmarkEnd(name="perro"))
    paragraph.addText(" pan")
    paragraph.addElement(text.SoftPageBreak())
    paragraph.addText(" duro.")
    note = text.Note(id="ftn1", noteclass="footnote")
    note.addElement(text.NoteCitation(text="1"))
    body = text.NoteBody()
    body.addElement(text.P(text="Una nota."))
    note.addElement(body)
    paragraph.addElement(note)
    paragraph.addText(" Nombre:")
    paragraph.addElement(text.Tab())
    paragraph.addText("Ana")
    paragraph.addElement(text.LineBreak())
    paragraph.addText("Fin  del texto.")
    document.text.addElement(paragraph)
    moved = text.P(text="La casa ")
    span = text.Span(stylename=bold)
    span.addElement(text.A(href="https://example.org/", text="roja"))
    moved.addElement(span)
    moved.addElement(text.Tab())
    moved.addText("grande.")
    document.text.addElement(moved)
    read = files.read_file(".odt", odf_bytes(document))
    assert [p.runs for p in read.paragraphs] == [
        ["El perro ", "come", " pan", " duro.", " Nombre:", "\t", "Ana", "\n", "Fin  del texto."],
        ["Una nota."],
        ["La casa ", "roja", "\t", "grande."],
    ]
    # words out of their runs' order: each in a copy of its run's span and link, the tab kept
    read.paragraphs[2].write([(0, "The "), (1, "red"), (0, " house,"), (3, " big.")])
    for paragraph in read.paragraphs[:2]:  # the translator reads a tab as a space
        said = upper_cased(paragraph.text.replace("\t", " "))
        paragraph.write(segments(paragraph.runs, said))
    written, _, moved = load(io.BytesIO(read.save())).getElementsByType(text.P)
    assert teletype.extractText(moved) == "The red house, big.\t"
    (link,) = moved.getElementsByType(text.A)
    assert teletype.extractText(link) == "red" and link.parentNode.getAttribute("stylename")
    kinds = [
        c.data if isinstance(c, Text) else (c.qname[1], teletype.extractText(c))
        for c in written.childNodes
    ]
    assert kinds == [  # the white space beside what stays is the source's (_edged)
        "EL PERRO ",
        ("bookmark-start", ""),
        ("span", "COME"),
        ("bookmark-end", ""),
        " PAN",
        ("soft-page-break", ""),
        " DURO.",
        ("note", "1UNA NOTA."),
        " NOMBRE:",
        ("tab", ""),
        "ANA",
        ("line-break", ""),
        "FIN ",
        ("s", ""),  # the second space
        "DEL TEXTO.",
    ]
    assert (
        teletype.extractText(written)
        == "EL PERRO COME PAN DURO.1UNA NOTA. NOMBRE:\tANA\nFIN  DEL TEXTO."
    )


def test_a_pptx_chart_keeps_its_titles_translated_and_its_data_as_it_is():
    """A chart's title and its axes' titles (text a reader sees on the slide) were not read;
    its categories and series are its data and stay, as does a title Office makes itself."""
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    data = CategoryChartData()
    data.categories = ["Enero", "Febrero"]
    data.add_series("Ventas", (1, 2))
    for titled in (True, False):
        kind = XL_CHART_TYPE.COLUMN_CLUSTERED if titled else XL_CHART_TYPE.PIE
        shape = slide.shapes.add_chart(kind, Inches(1), Inches(1), Inches(4), Inches(3), data)
        shape.chart.has_title = True  # the pie's title Office writes from its series' name
        if titled:
            shape.chart.chart_title.text_frame.text = "Ventas por mes"
            shape.chart.value_axis.has_title = True
            shape.chart.value_axis.axis_title.text_frame.text = "Unidades vendidas"
    out = io.BytesIO()
    presentation.save(out)
    read = files.read_file(".pptx", out.getvalue())
    assert [p.runs for p in read.paragraphs] == [["Ventas por mes"], ["Unidades vendidas"]]
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    column, pie = [s.chart for s in pptx.Presentation(io.BytesIO(read.save())).slides[0].shapes]
    assert column.chart_title.text_frame.text == "VENTAS POR MES"
    assert column.value_axis.axis_title.text_frame.text == "UNIDADES VENDIDAS"
    assert list(column.plots[0].categories) == ["Enero", "Febrero"]
    assert not pie.chart_title.has_text_frame


def test_a_pptx_sentence_over_a_line_break_is_one_text():
    """A paragraph holding a line break was translated a run at a time, a sentence over
    the break in two halves; the runs on both sides of a break are one text, the break
    kept. A field (a slide number) still parts the texts, so that each keeps the white
    space beside it."""
    from pptx.oxml.ns import qn

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(2)).text_frame
    broken = box.paragraphs[0]
    broken.add_run().text = "El perro come"
    broken.add_line_break()
    run = broken.add_run()
    run.text, run.font.bold = "pan duro.", True
    numbered = box.add_paragraph()
    numbered.add_run().text = "Diapositiva "
    number = numbered._p.makeelement(qn("a:fld"), {"id": "{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}"})
    number.set("type", "slidenum")
    number.append(number.makeelement(qn("a:t"), {}))
    number[0].text = "3"
    numbered._p.append(number)
    numbered.add_run().text = " de diez."
    out = io.BytesIO()
    presentation.save(out)
    read = files.read_file(".pptx", out.getvalue())
    assert [p.runs for p in read.paragraphs] == [
        ["El perro come", "\n", "pan duro."],
        ["Diapositiva "],
        [" de diez."],
    ]
    read.paragraphs[0].write([(0, "The dog eats"), (1, "\n"), (2, "hard bread.")])
    read.paragraphs[1].write([(0, "Slide ")])
    read.paragraphs[2].write([(0, " of ten.")])
    written = pptx.Presentation(io.BytesIO(read.save())).slides[0].shapes[0].text_frame
    first, second = written.paragraphs
    assert first.text == "The dog eats\vhard bread."  # python-pptx reads a break as \v
    assert [bool(r.font.bold) for r in first.runs] == [False, True]
    assert second.text == "Slide 3 of ten." and 'type="slidenum"' in second._p.xml


def test_a_pptx_line_break_gains_no_space_when_translated_again():
    """The translation carries the source's line break, written as a space beside the
    break that stays: "REVISAR " after one round, "REVISAR  " after two. A run beside a
    break keeps the source's white space at that edge, so a round trip adds nothing."""
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(2)).text_frame
    box.text = "Revisar\vel plan. Hoy."  # a run, a line break, a run
    out = io.BytesIO()
    presentation.save(out)
    data = out.getvalue()
    for _ in range(2):
        read = files.read_file(".pptx", data)
        for batch in read.batches(64):
            batch.write([upper_cased(text) for text in batch.texts])
        data = read.save()
        paragraph = pptx.Presentation(io.BytesIO(data)).slides[0].shapes[0].text_frame
        assert [r.text for r in paragraph.paragraphs[0].runs] == ["REVISAR", "EL PLAN. HOY."]
        assert len(paragraph.paragraphs[0]._p.xpath("a:br")) == 1


def test_a_docx_field_between_runs_keeps_the_white_space_beside_it():
    """ "Página " PAGE " de " NUMPAGES is one text, "Página  de "; the translation's words
    carry their spaces before them, so "Page" went before the page number with none:
    "Page1 of 5". The white space at a run's edge where a field stays is the source's, in
    a .docx as in an .odt."""
    paragraph = (
        f"<w:p>{run('Página ')}{field('begin')}<w:r><w:instrText> PAGE </w:instrText></w:r>"
        f"{field('separate')}{run('1')}{field('end')}{run(' de ', True)}"
        "<w:fldSimple w:instr=' NUMPAGES '><w:r><w:t>5</w:t></w:r></w:fldSimple></w:p>"
    )
    read = files.read_file(".docx", docx_of(paragraph, {}))
    (footer,) = [p for p in read.paragraphs if p.text.startswith("Página")]
    assert footer.runs == ["Página ", " de "]
    said = aligned(["▁Página", "▁de", "</s>"], ["▁Page", "▁of", "</s>"], [0, 1, 2], "Page of", 10)
    said["hypotheses"][0]["text"] = "Page of "  # the space after the sentence, as it was
    placed = segments(footer.runs, said)
    assert placed == [(0, "Page"), (1, " of ")]
    footer.write(placed)
    main = zipfile.ZipFile(io.BytesIO(read.save())).read("word/document.xml").decode()
    shown = "".join(re.findall(r"<w:t(?: [^>]*)?>([^<]*)</w:t>", main))
    assert shown.endswith("Page 1 of 5"), shown
    document = OpenDocumentText()  # an .odt's page number and count alike
    numbered = text.P(text="Página ")
    numbered.addElement(text.PageNumber(selectpage="current", text="1"))
    numbered.addText(" de ")
    numbered.addElement(text.PageCount(text="5"))
    document.text.addElement(numbered)
    read = files.read_file(".odt", odf_bytes(document))
    read.paragraphs[0].write(segments(read.paragraphs[0].runs, said))
    written = load(io.BytesIO(read.save())).getElementsByType(text.P)[0]
    assert teletype.extractText(written) == "Page 1 of 5"
