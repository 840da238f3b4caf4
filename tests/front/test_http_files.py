"""Files translated whole (service.front.http.files): each format read into paragraphs of
runs and written back, and a translation cut into runs by its alignment."""

from __future__ import annotations

import io

import docx
import pytest
from odf import teletype, text
from odf.element import Text
from odf.opendocument import OpenDocumentText, load
from odf.style import Style, TextProperties

from service.front.http import files


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
    assert files.segments(runs, BOLD_VERB) == [(0, "The dog"), (1, " eats"), (2, " bread.")]
    assert files.segments(["El perro come pan."], BOLD_VERB) == [(0, "The dog eats bread.")]
    # the alignment at the hypothesis, as for a text of one sentence
    alignment = BOLD_VERB["sentences"][0]["alignment"]
    moved = {
        "hypotheses": [{**BOLD_VERB["hypotheses"][0], "alignment": alignment}],
        "sentences": [{**BOLD_VERB["sentences"][0], "alignment": None}],
    }
    assert files.segments(runs, moved) == [(0, "The dog"), (1, " eats"), (2, " bread.")]


def test_a_text_that_is_not_its_pieces_goes_whole_to_one_run():
    changed = {**BOLD_VERB, "hypotheses": [{"text": "The dog eats bread, https://x.org."}]}
    changed["sentences"] = [{**BOLD_VERB["sentences"][0], "targetEnd": 33}]
    placed = files.segments(["El perro ", "come", " pan."], changed)
    assert placed == [(0, "The dog eats bread, https://x.org.")]  # the first of the most
    unaligned = {"hypotheses": [{"text": "Hi."}], "sentences": [{"sourceEnd": 18, "targetEnd": 3}]}
    assert files.segments(["El perro ", "come", " pan."], unaligned) == [(1, "Hi.")]


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
    out = io.BytesIO()
    document.write(out)
    read = files.read_file(".odt", out.getvalue())
    assert [p.runs for p in read.paragraphs] == [
        ["El perro ", "come", " pan."],
        ["Hola."],
        ["Adiós."],
    ]
    read.paragraphs[0].write([(0, "The dog"), (1, " eats"), (2, " bread.")])
    read.paragraphs[1].write([(0, "Hello.")])
    read.paragraphs[2].write([(0, "Goodbye.")])
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


def test_a_text_file_is_its_blocks_between_blank_lines():
    content = "Hola.\nAdiós.\n\n  \nBuenos días.\n" + "Uno. " * 30_000
    read = files.read_file(".txt", content.encode())
    assert [p.runs for p in read.paragraphs] == [
        ["Hola.\nAdiós."],
        ["Buenos días.\n" + "Uno. " * 30_000],
    ]
    read.paragraphs[0].write([(0, "Hello.\nGoodbye.")])
    read.paragraphs[1].write([(0, "Good morning.")])
    assert read.save().decode() == "Hello.\nGoodbye.\n\n  \nGood morning."


def test_html_is_one_paragraph_and_other_files_are_refused():
    read = files.read_file(".html", b"<p>Hola</p>")
    assert read.text_format == "html" and read.paragraphs[0].runs == ["<p>Hola</p>"]
    read.paragraphs[0].write([(0, "<p>Hello</p>")])
    assert read.save() == b"<p>Hello</p>"
    for suffix, data in ((".docx", b"not a zip"), (".odt", b"nor this"), (".pdf", b"%PDF")):
        with pytest.raises(ValueError):
            files.read_file(suffix, data)
