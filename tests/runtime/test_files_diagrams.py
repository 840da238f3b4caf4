"""SmartArt in a .docx or .pptx (service.runtime.files.diagrams, which
service.runtime.files.word and service.runtime.files.slides read the diagrams of their
parts with): the text of a diagram's data points and of its cached drawing translated, each
kept in its runs, what else the diagram's parts hold as it was."""

from __future__ import annotations

import io
import zipfile

import docx
import pptx
import pytest
from helpers import upper_cased
from lxml import etree

from service.runtime import files
from service.runtime.files import diagrams
from service.runtime.files.word import qn_w

A = "http://schemas.openxmlformats.org/drawingml/2006/main"
DGM = "http://schemas.openxmlformats.org/drawingml/2006/diagram"
DSP = "http://schemas.microsoft.com/office/drawing/2008/diagram"
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
NAMESPACES = {"a": A, "dgm": DGM, "dsp": DSP}
DATA_TYPE = "application/vnd.openxmlformats-officedocument.drawingml.diagramData+xml"
DRAWING_TYPE = "application/vnd.ms-office.drawingml.diagramDrawing+xml"


def runs(*texts: str) -> str:
    """DrawingML runs of `texts` in Spanish, the second bold; "\n" a line break."""
    made = []
    for i, text in enumerate(texts):
        bold = ' b="1"' if i == 1 else ""
        made.append(
            "<a:br/>"
            if text == "\n"
            else f'<a:r><a:rPr lang="es-ES"{bold}/><a:t>{text}</a:t></a:r>'
        )
    return "".join(made)


def point(model: str, paragraph: str, kind: str = "") -> str:
    kind = f' type="{kind}"' if kind else ""
    return (
        f'<dgm:pt modelId="{model}"{kind}><dgm:prSet phldrT="[Texto]"/><dgm:spPr/><dgm:t>'
        f"<a:bodyPr/><a:lstStyle/><a:p>{paragraph}</a:p></dgm:t></dgm:pt>"
    )


def data_part(drawing: str) -> bytes:
    """A diagram's data (its points: the document, two nodes, a presentation point each, a
    connection) whose cached drawing is the relationship `drawing` of the part showing it."""
    return (
        f'<dgm:dataModel xmlns:dgm="{DGM}" xmlns:a="{A}"><dgm:ptLst>'
        + point("{0}", '<a:endParaRPr lang="es-ES"/>', "doc")
        + point("{1}", runs("Primer ", "paso"))
        + point("{2}", runs("Revisar", "\n", "el plan."))
        + '<dgm:pt modelId="{P1}" type="pres"><dgm:prSet presAssocID="{1}" presName="node"/>'
        "<dgm:spPr/></dgm:pt>"
        '</dgm:ptLst><dgm:cxnLst><dgm:cxn modelId="{C1}" srcId="{0}" destId="{1}" srcOrd="0"'
        ' destOrd="0"/></dgm:cxnLst><dgm:bg/><dgm:whole/><dgm:extLst>'
        f'<a:ext uri="http://schemas.microsoft.com/office/drawing/2008/diagram">'
        f'<dsp:dataModelExt xmlns:dsp="{DSP}" relId="{drawing}" minVer="{DGM}"/></a:ext>'
        "</dgm:extLst></dgm:dataModel>"
    ).encode()


def shape(model: str, paragraph: str | None) -> str:
    text = f"<dsp:txBody><a:bodyPr/><a:lstStyle/><a:p>{paragraph}</a:p></dsp:txBody>"
    return (
        f'<dsp:sp modelId="{model}"><dsp:nvSpPr><dsp:cNvPr id="0" name=""/><dsp:cNvSpPr/>'
        f"</dsp:nvSpPr><dsp:spPr/>{text if paragraph is not None else ''}</dsp:sp>"
    )


# the cached drawing: the nodes' shapes, an arrow without text, and a shape whose text the
# data no longer holds (a drawing not redrawn since)
DRAWING = (
    f'<dsp:drawing xmlns:dgm="{DGM}" xmlns:dsp="{DSP}" xmlns:a="{A}"><dsp:spTree>'
    '<dsp:nvGrpSpPr><dsp:cNvPr id="0" name=""/><dsp:cNvGrpSpPr/></dsp:nvGrpSpPr><dsp:grpSpPr/>'
    + shape("{P1}", '<a:pPr lvl="0"/>' + runs("Primer ", "paso"))
    + shape("{A1}", None)
    + shape("{P2}", runs("Revisar", "\n", "el plan."))
    + shape("{P3}", runs("Paso viejo."))
    + "</dsp:spTree></dsp:drawing>"
).encode()


def with_diagram(part, package, part_type, uri) -> str:
    """The diagram's data and drawing parts made and related from `part`; the XML of the
    graphic frame's data naming them."""
    drawing = part_type(uri("/diagrams/drawing1.xml"), DRAWING_TYPE, DRAWING, package)
    drawing_id = part.relate_to(drawing, diagrams.DIAGRAM_DRAWING)
    data = part_type(uri("/diagrams/data1.xml"), DATA_TYPE, data_part(drawing_id), package)
    data_id = part.relate_to(data, diagrams.DIAGRAM_DATA)
    return (
        f'<a:graphicData xmlns:a="{A}" uri="{DGM}"><dgm:relIds xmlns:dgm="{DGM}" '
        f'xmlns:r="{R}" r:dm="{data_id}" r:lo="" r:qs="" r:cs=""/></a:graphicData>'
    )


def smartart_docx() -> bytes:
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part

    document = docx.Document()
    document.add_paragraph("Un diagrama:")
    package = document.part.package

    def part(name, content_type, blob, owner):
        return Part(name, content_type, blob, owner)

    frame = with_diagram(document.part, package, part, lambda n: PackURI("/word" + n))
    paragraph = document.add_paragraph()
    paragraph._p.append(etree.fromstring(f'<w:r xmlns:w="{qn_w("")[1:-1]}"><w:drawing/></w:r>'))
    paragraph._p[-1][-1].append(etree.fromstring(frame))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def smartart_pptx() -> bytes:
    from pptx.opc.package import Part
    from pptx.opc.packuri import PackURI
    from pptx.util import Inches

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text = "Un diagrama:"
    package = presentation.part.package

    def part(name, content_type, blob, owner):
        return Part(name, content_type, owner, blob)

    frame = with_diagram(slide.part, package, part, lambda n: PackURI("/ppt" + n))
    slide.shapes._spTree.append(etree.fromstring(frame))  # where a graphic frame holds it
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def texts(root, path: str) -> list[str]:
    """The text of each paragraph at `path`, a line break read as "\n"."""
    return [
        "".join(
            "\n" if e.tag == f"{{{A}}}br" else e.text or ""
            for e in p.iter(f"{{{A}}}t", f"{{{A}}}br")
        )
        for p in root.iterfind(path, NAMESPACES)
    ]


@pytest.mark.parametrize(
    ("suffix", "made", "folder"),
    [(".docx", smartart_docx, "word"), (".pptx", smartart_pptx, "ppt")],
)
def test_a_smartart_diagram_s_data_and_drawing_are_translated_in_their_runs(suffix, made, folder):
    """A SmartArt diagram keeps its text in its data part's points and draws it in a cached
    drawing, parts of their own that stayed Spanish: an application that lays the diagram
    out from its data and one that shows the drawing each showed the source. The drawing's
    paragraphs that hold a point's runs are that point's, written with it (translated once,
    the same in both); one the data no longer holds is translated on its own."""
    read = files.read_file(suffix, made())
    assert [p.runs for p in read.paragraphs] == [
        ["Un diagrama:"],
        ["Primer ", "paso"],
        ["Revisar", "\n", "el plan."],
        ["Paso viejo."],
    ]
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    read.declare("es", "en")
    saved = zipfile.ZipFile(io.BytesIO(read.save()))
    data = etree.fromstring(saved.read(f"{folder}/diagrams/data1.xml"))
    drawing = etree.fromstring(saved.read(f"{folder}/diagrams/drawing1.xml"))
    assert texts(data, ".//dgm:pt/dgm:t/a:p") == ["", "PRIMER PASO", "REVISAR\nEL PLAN."]
    shown = ["PRIMER PASO", "REVISAR\nEL PLAN.", "PASO VIEJO."]  # no space beside the break
    assert texts(drawing, ".//dsp:txBody/a:p") == shown
    for root in (data, drawing):
        bold = root.xpath(".//a:r[a:rPr/@b='1']/a:t/text()", namespaces=NAMESPACES)
        assert "PASO" in bold[0] and "PRIMER" not in bold[0]
        assert len(root.xpath(".//a:p[a:br]", namespaces=NAMESPACES)) == 1  # the break stays
        assert not root.xpath(".//@lang[.='es-ES']") and root.xpath(".//@lang[.='en']")
    # what else the parts hold stays: the placeholders' prompts, the points and their links
    assert data.xpath("//dgm:prSet/@phldrT", namespaces=NAMESPACES) == ["[Texto]"] * 3
    assert data.xpath("//dgm:pt/@modelId", namespaces=NAMESPACES) == ["{0}", "{1}", "{2}", "{P1}"]
    assert drawing.xpath("//dsp:sp/@modelId", namespaces=NAMESPACES) == [
        "{P1}",
        "{A1}",
        "{P2}",
        "{P3}",
    ]
    assert drawing.xpath("//a:pPr/@lvl", namespaces=NAMESPACES) == ["0"]
    assert data.xpath("//dsp:dataModelExt/@relId", namespaces=NAMESPACES)


def emptied(part: bytes) -> bytes:
    """A diagram's part as a new diagram's: its points' text not typed yet (the placeholders'
    prompts show), its runs' language English; written as a tool writes it, with an XML
    declaration and each element on a line of its own."""
    part = part.replace(b"><", b">\r\n<").replace(b' lang="es-ES"', b' lang="en-US"')
    for said in (b"Primer ", b"paso", b"Revisar", b"el plan.", b"Paso viejo."):
        part = part.replace(b">" + said + b"<", b"><")
    return b'<?xml version="1.0" encoding="UTF-8"?>\r\n' + part


@pytest.mark.parametrize(
    ("suffix", "made", "folder"),
    [(".docx", smartart_docx, "word"), (".pptx", smartart_pptx, "ppt")],
)
def test_a_diagram_with_nothing_to_translate_keeps_its_parts_byte_for_byte(suffix, made, folder):
    """A diagram's parts were written back though they held no text to translate and no
    source language: their declaration and the white space between their elements
    changed."""
    original, out = zipfile.ZipFile(io.BytesIO(made())), io.BytesIO()
    diagram = [f"{folder}/diagrams/data1.xml", f"{folder}/diagrams/drawing1.xml"]
    parts = [emptied(original.read(name)) for name in diagram]
    with zipfile.ZipFile(out, "w") as written:
        for name in original.namelist():
            body = original.read(name)
            written.writestr(name, parts[diagram.index(name)] if name in diagram else body)
    read = files.read_file(suffix, out.getvalue())
    assert [p.text for p in read.paragraphs] == ["Un diagrama:"]
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    read.declare("es", "en")
    saved = zipfile.ZipFile(io.BytesIO(read.save()))
    assert [saved.read(name) for name in diagram] == parts
