"""PDF documents translated whole (service.runtime.files.pdf): each text box of a page
translated where it stood, in its font's style, the page's text taken out of the content
streams that showed it (a form XObject's too); pages, drawings, pictures and links kept;
what cannot be drawn again kept as it was; encrypted and broken files refused."""

from __future__ import annotations

import io
import itertools

import pypdf
import pytest
from helpers import upper_cased
from pdfminer.high_level import extract_pages, extract_text
from pdfminer.layout import LTChar, LTContainer, LTImage, LTRect, LTTextBox
from PIL import Image
from reportlab.lib.pagesizes import A4, landscape, letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

from service.runtime import files
from service.runtime.files import (
    pdf,
    pdfalone,
    pdfcontinued,
    pdfdraw,
    pdflines,
    pdfparagraphs,
    pdftext,
)

LINK = "https://example.org/informe"


def made(*pages, size=A4, **given) -> bytes:
    """A PDF of one page per function of `pages`, each drawing on a reportlab canvas."""
    out = io.BytesIO()
    drawing = canvas.Canvas(out, pagesize=size, **given)
    for page in pages:
        page(drawing)
        drawing.showPage()
    drawing.save()
    return out.getvalue()


def report(c) -> None:
    """A bold heading, a paragraph of two lines with a bold word, a red paragraph in a box
    of its own, a filled rectangle, a picture and a link."""
    c.setFont("Helvetica-Bold", 18)
    c.drawString(72, 760, "Informe anual")
    text = c.beginText(72, 720)
    text.setFont("Helvetica", 11)
    text.textOut("El perro ")
    text.setFont("Helvetica-Bold", 11)
    text.textOut("come")
    text.setFont("Helvetica", 11)
    text.textLine(" pan en la cocina de la casa vieja")
    text.textLine("y luego sale al jardín a jugar con los niños.")
    c.drawText(text)
    c.setFillColorRGB(1, 0, 0)
    c.setFont("Times-Roman", 12)
    c.drawString(320, 500, "La casa es grande.")
    c.setFillColorRGB(0, 0, 1)
    c.rect(100, 300, 150, 80, fill=1, stroke=0)
    picture = Image.new("RGB", (8, 8), (0, 128, 0))
    c.drawImage(ImageReader(picture), 300, 300, 40, 40)
    c.linkURL(LINK, (72, 755, 200, 780))


def second(c) -> None:
    c.setPageSize(landscape(letter))
    c.setFont("Helvetica", 12)
    c.drawString(72, 500, "Segunda página.")


def translated(data: bytes) -> bytes:
    """`data` read, translated by the stand-in (each sentence upper-cased, each word
    attending to itself) as a call of the server answers, and saved."""
    read = files.read_file(".pdf", data)
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    return read.save()


def characters(data: bytes, page: int = 0) -> list[LTChar]:
    laid = list(extract_pages(io.BytesIO(data)))[page]
    return list(pdf._characters([laid]))


def boxes(data: bytes, page: int = 0) -> dict[str, tuple[float, ...]]:
    """Each text box's text (its lines joined by spaces) and its box."""
    laid = list(extract_pages(io.BytesIO(data)))[page]
    found = {}
    for item in laid:
        if isinstance(item, LTTextBox):
            found[" ".join(item.get_text().split())] = item.bbox
    return found


def test_each_box_is_a_paragraph_of_runs_of_one_style():
    read = files.read_file(".pdf", made(report, second))
    assert [p.runs for p in read.paragraphs] == [
        ["Informe anual"],
        [
            "El perro ",
            "come",
            " pan en la cocina de la casa vieja y luego sale al jardín a jugar con los niños.",
        ],
        ["La casa es grande."],
        ["Segunda página."],
    ]


def test_a_pdf_is_translated_box_by_box_where_it_stood_its_pages_kept():
    source = made(report, second)
    written = translated(source)
    text = extract_text(io.BytesIO(written))
    for gone in ("Informe", "perro", "jardín", "casa", "Segunda"):
        assert gone not in text
    before, after = boxes(source), boxes(written)
    assert set(after) == {
        "INFORME ANUAL",
        "EL PERRO COME PAN EN LA COCINA DE LA CASA VIEJA Y LUEGO SALE AL JARDÍN A JUGAR CON LOS"
        " NIÑOS.",
        "LA CASA ES GRANDE.",
    }
    for source_text, target_text in [
        ("Informe anual", "INFORME ANUAL"),
        ("La casa es grande.", "LA CASA ES GRANDE."),
    ]:
        x0, y0, _, y1 = before[source_text]
        tx0, ty0, _, ty1 = after[target_text]
        assert abs(tx0 - x0) < 0.5 and y0 - 1 <= ty0 and ty1 <= y1 + 1  # its box, its left
    paragraph = next(box for text, box in before.items() if text.startswith("El perro"))
    moved = next(box for text, box in after.items() if text.startswith("EL PERRO"))
    assert abs(moved[0] - paragraph[0]) < 0.5 and abs(moved[3] - paragraph[3]) < 1
    (alone,) = boxes(source, 1).values()
    ((words, box),) = boxes(written, 1).items()  # wider, as the page has room: not smaller
    assert words == "SEGUNDA PÁGINA." and box[1::2] == alone[1::2] and box[0] == alone[0]
    reader, original = pypdf.PdfReader(io.BytesIO(written)), pypdf.PdfReader(io.BytesIO(source))
    assert [p.mediabox for p in reader.pages] == [p.mediabox for p in original.pages]


def test_a_pdf_keeps_its_drawings_pictures_and_links_and_its_fonts_styles():
    source = made(report, second)
    written = translated(source)
    laid = next(extract_pages(io.BytesIO(written)))
    rectangles = [item.bbox for item in laid if isinstance(item, LTRect)]
    assert (100, 300, 250, 380) in rectangles

    def images(container):
        return [i for i in container if isinstance(i, LTImage)] + [
            found for i in container if isinstance(i, LTContainer) for found in images(i)
        ]

    assert [image.bbox for image in images(laid)] == [(300, 300, 340, 340)]
    (link,) = [a.get_object() for a in pypdf.PdfReader(io.BytesIO(written)).pages[0]["/Annots"]]
    assert link["/Subtype"] == "/Link" and link["/A"]["/URI"] == LINK
    fonts = {}
    for char in characters(written):
        fonts.setdefault(char.fontname, []).append(char.get_text())
    assert "".join(fonts["Helvetica-Bold"]).split() == ["INFORME", "ANUAL", "COME"]
    red = [c for c in characters(written) if c.graphicstate.ncolor == (1, 0, 0)]
    assert "".join(c.get_text() for c in red) == "LA CASA ES GRANDE."
    assert {c.fontname for c in red} == {"Times-Roman"}


@pytest.mark.parametrize(("declared", "after"), [("es-ES", "en"), ("fr", "fr")])
def test_a_pdf_declares_the_target_language_where_it_declared_the_source_s(declared, after):
    read = files.read_file(".pdf", made(second, lang=declared))
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    read.declare("es", "en")
    assert pypdf.PdfReader(io.BytesIO(read.save())).trailer["/Root"]["/Lang"] == after


def test_text_in_a_form_drawn_on_every_page_is_translated_on_each():
    """A running header is a form XObject every page draws: its text goes from the form
    once, and each page draws the header's translation."""

    def page(words):
        def drawn(c):
            c.doForm("header")
            c.setFont("Helvetica", 12)
            c.drawString(72, 700, words)

        return drawn

    def header(c):
        c.beginForm("header")
        c.setFont("Helvetica", 9)
        c.drawString(72, 800, "Cabecera del informe")
        c.endForm()
        page("Primera página.")(c)

    written = translated(made(header, page("Segunda página.")))
    for number, words in enumerate(("PRIMERA PÁGINA.", "SEGUNDA PÁGINA.")):
        assert set(boxes(written, number)) == {"CABECERA DEL INFORME", words}


def test_a_translation_stays_within_what_a_cropped_page_shows():
    """A page cropped (its crop box narrower than its media box): the page's right margin,
    as far as a wider translation may run, is the crop box's, not the media box's."""
    from pypdf.generic import RectangleObject

    def line(c):
        c.setFont("Helvetica", 12)
        c.drawString(72, 700, "La casa de la abuela es grande y muy vieja.")

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(made(line))))
    writer.pages[0].cropbox = RectangleObject([0, 0, 72 + 240, 842])
    out = io.BytesIO()
    writer.write(out)
    written = [c for c in characters(translated(out.getvalue())) if c.get_text().strip()]
    assert "".join(c.get_text() for c in written) == "LACASADELAABUELAESGRANDEYMUYVIEJA."
    assert max(c.x1 for c in written) <= 72 + 240


def test_rotated_text_stays_as_it_was_and_the_rest_is_translated():
    def page(c):
        c.setFont("Helvetica", 12)
        c.drawString(72, 700, "Texto recto.")
        c.saveState()
        c.translate(300, 300)
        c.rotate(90)
        c.drawString(0, 0, "Texto girado.")
        c.restoreState()

    read = files.read_file(".pdf", made(page))
    assert [p.text for p in read.paragraphs] == ["Texto recto."]
    written = translated(made(page))
    text = extract_text(io.BytesIO(written))
    assert "TEXTO RECTO." in text and "Texto recto" not in text
    turned = sorted((c for c in characters(written) if c.matrix[1]), key=lambda c: c.matrix[5])
    assert "".join(c.get_text() for c in turned) == "Texto girado."  # kept, not translated


def written_page(content: bytes) -> bytes:
    """A page of `content` (a content stream) with Helvetica as /F1 and a Type3 font of
    one glyph, a bullet (a square) at code 149, as /F2."""
    from pypdf.generic import (
        ArrayObject,
        ContentStream,
        DecodedStreamObject,
        DictionaryObject,
        FloatObject,
        NameObject,
        NumberObject,
    )

    writer = pypdf.PdfWriter()
    page = writer.add_blank_page(612, 792)
    font = {"/Type": "/Font", "/Subtype": "/Type1", "/BaseFont": "/Helvetica"}
    font = DictionaryObject({NameObject(k): NameObject(v) for k, v in font.items()})
    glyph = DecodedStreamObject()
    glyph.set_data(b"500 0 100 100 400 400 d1 100 100 300 300 re f")

    def named(**values) -> DictionaryObject:
        return DictionaryObject({NameObject("/" + k): v for k, v in values.items()})

    bullet = named(
        Type=NameObject("/Font"),
        Subtype=NameObject("/Type3"),
        FontBBox=ArrayObject(NumberObject(n) for n in (0, 0, 500, 500)),
        FontMatrix=ArrayObject(FloatObject(n) for n in (0.001, 0, 0, 0.001, 0, 0)),
        CharProcs=named(bullet=writer._add_object(glyph)),  # a stream: indirect
        Encoding=named(Differences=ArrayObject([NumberObject(149), NameObject("/bullet")])),
        FirstChar=NumberObject(149),
        LastChar=NumberObject(149),
        Widths=ArrayObject([NumberObject(500)]),
        Resources=named(),
    )
    fonts = DictionaryObject({NameObject("/F1"): font, NameObject("/F2"): bullet})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
    stream = ContentStream(None, writer)
    stream.set_data(content)
    page.replace_contents(stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_text_placed_after_a_translated_box_s_text_stays_where_it_was():
    """Invisible text (a scan's recognised layer) stays, not translated; where it follows
    a translated box's text on the line, it stays in its place, though what it followed
    is gone."""
    source = written_page(b"BT /F1 12 Tf 72 700 Td (Hola.) Tj [-30000] TJ 3 Tr (oculto) Tj ET")
    read = files.read_file(".pdf", source)
    assert [p.text for p in read.paragraphs] == ["Hola."]

    def hidden(data: bytes) -> list[tuple[str, float]]:
        return [(c.get_text(), round(c.x0, 3)) for c in characters(data) if c.x0 > 300]

    written = translated(source)
    assert "".join(text for text, _ in hidden(written)) == "oculto"
    assert hidden(written) == hidden(source)
    assert "HOLA." in extract_text(io.BytesIO(written))


def test_letter_spaced_text_is_read_as_its_words():
    """Character spacing (`Tc`) widens the gaps between letters past what the layout
    analysis takes for a space: the words are read as they are, not letter by letter,
    whether a space character or a TJ array's offset parts them."""
    source = written_page(
        b"BT /F1 12 Tf 3 Tc 72 700 Td (Texto con espaciado.) Tj"
        b" 0 -20 Td [(Otra) -400 (linea.)] TJ ET"
    )
    read = files.read_file(".pdf", source)
    assert [p.text for p in read.paragraphs] == ["Texto con espaciado.", "Otra linea."]
    assert "TEXTO CON ESPACIADO." in extract_text(io.BytesIO(translated(source)))


def test_a_space_widened_by_an_offset_or_word_spacing_is_read_as_one_space():
    """A space character followed by a gap (a TJ array's offset, word spacing `Tw`, as
    justified text widens its spaces) is one space between the words, not two."""
    source = written_page(
        b"BT /F1 12 Tf 72 700 Td [(Dos ) -600 (palabras.)] TJ"
        b" 0 -20 Td 4 Tw (Con espacio.) Tj 0 -20 Td 0 Tw [(Tres) -600 ( juntas.)] TJ ET"
    )
    read = files.read_file(".pdf", source)
    assert [p.text for p in read.paragraphs] == ["Dos palabras.", "Con espacio.", "Tres juntas."]


def test_a_paragraph_that_cannot_be_drawn_again_keeps_its_box_s_others_translated():
    """A paragraph with text that cannot be drawn again (here invisible) stays as it was;
    another paragraph the layout analysis boxed with it is translated all the same."""
    source = written_page(
        b"BT /F1 12 Tf 72 700 Td (Una frase corta.) Tj 0 -14 Td 3 Tr"
        b" (Texto oculto de la capa reconocida de una hoja escaneada.) Tj ET"
    )
    assert len(boxes(source)) == 1  # one box of the layout analysis: the case here
    assert [p.text for p in files.read_file(".pdf", source).paragraphs] == ["Una frase corta."]
    text = extract_text(io.BytesIO(translated(source)))
    assert "UNA FRASE CORTA." in text and "Una frase" not in text
    assert "Texto oculto de la capa reconocida de una hoja escaneada." in text


def test_a_text_operator_taken_out_keeps_its_move_spacing_and_advance():
    """`'` moves to the next line, `"` sets the spacing too: those stay when their text
    goes; each text operator taken out leaves its advance, those not numbered stay."""
    from pypdf.generic import ContentStream

    writer = pypdf.PdfWriter()
    content = ContentStream(None, writer)
    content.set_data(b"BT (a) Tj (b) ' 1 2 (c) \" [(d) -5 (e)] TJ (f) Tj ET")
    assert pdftext.shows(content) == 5
    kept = pdftext.unshown(content, {0: 500.0, 1: None, 2: 250.0, 4: 0.0})
    written = [(operator.decode(), [str(o) for o in operands]) for operands, operator in kept]
    assert written == [
        ("BT", []),
        ("TJ", ["[500]"]),
        ("T*", []),
        ("Tw", ["1"]),
        ("Tc", ["2"]),
        ("T*", []),
        ("TJ", ["[250]"]),
        ("TJ", ["['d', -5, 'e']"]),
        ("ET", []),
    ]


def test_a_pdf_without_text_comes_back_as_it_was():
    """A scanned page (a picture, no text) has nothing to translate: the same bytes."""

    def scan(c):
        c.drawImage(ImageReader(Image.new("L", (16, 16), 200)), 0, 0, *A4)

    source = made(scan)
    read = files.read_file(".pdf", source)
    assert read.paragraphs == [] and read.save() == source


def test_an_encrypted_or_broken_pdf_is_refused_and_so_is_one_of_too_many_pages(monkeypatch):
    with pytest.raises(ValueError, match=r"^\.pdf: encrypted \(protected by a password\)"):
        files.read_file(".pdf", made(second, encrypt="secreto"))
    with pytest.raises(ValueError, match=r"^not a \.pdf file \("):
        files.read_file(".pdf", b"%PDF-1.7 not a document")
    monkeypatch.setattr(pdf, "PDF_PAGES", 1)
    with pytest.raises(ValueError, match=r"^\.pdf: more than 1 pages$"):
        files.read_file(".pdf", made(second, second))


def test_a_translation_too_long_for_its_box_is_drawn_smaller_but_never_too_small():
    style = pdfdraw.Style()
    box = pdfdraw.Box(72, 100, 172, 112, 102, 102, 10, 12, [style], room=172)
    box.placed = [(0, "Hola")]
    assert pdfdraw.laid_out(box).scale == 1.0
    box.placed = [(0, "Una frase bastante larga")]  # 2 lines at 10 pt; one fits at 8.5 pt
    fitted = pdfdraw.laid_out(box)
    assert fitted.scale < 1.0 and len(fitted.lines) == 1
    assert pdfdraw._wrapped(pdfdraw._words(box), 100, fitted.size + 0.5) != fitted.lines
    box.placed = [(0, "palabra " * 40)]
    least = pdfdraw.laid_out(box)
    assert least.size == pytest.approx(10 * pdfdraw.MIN_SCALE) and len(least.lines) > 1
    box.room = 400  # room beside it: wider before smaller
    box.placed = [(0, "Una frase bastante larga")]
    wider = pdfdraw.laid_out(box)
    assert wider.scale == 1.0 and wider.right == 400 and len(wider.lines) == 1


def test_a_word_longer_than_its_box_is_wide_is_drawn_smaller():
    """A table's cell of one word, wider translated than its cell (and no room beside it):
    drawn smaller to fit the cell's width, not across the cell's border."""
    style = pdfdraw.Style()
    width = pdfdraw._width("Ciudad", style, 10)
    box = pdfdraw.Box(72, 100, 72 + width, 112, 102, 102, 10, 12, [style], room=72 + width)
    box.placed = [(0, "CIUDAD")]
    layout = pdfdraw.laid_out(box)
    assert len(layout.lines) == 1 and layout.scale < 1.0
    assert pdfdraw._width("CIUDAD", style, layout.size) <= width
    assert pdfdraw._width("CIUDAD", style, layout.size + 10 * pdfdraw.SCALE_STEP) > width


def test_control_characters_of_a_translation_are_left_out_of_what_is_drawn():
    box = pdfdraw.Box(72, 100, 300, 112, 102, 102, 10, 12, [pdfdraw.Style()])
    box.placed = [(0, "Hola\x01 amigo\x0b\ud800.")]
    assert pdfdraw._words(box) == [
        [("Hola", box.styles[0])],
        [("amigo", box.styles[0])],
        [(".", box.styles[0])],
    ]


def test_a_font_s_name_gives_its_family_weight_and_slant():
    assert pdfdraw.Style.of("ABCDEF+Arial-BoldMT", ()).font("x") == "Helvetica-Bold"
    assert pdfdraw.Style.of("TimesNewRomanPS-ItalicMT", ()).font("x") == "Times-Italic"
    assert pdfdraw.Style.of("NimbusMonL-Regu", ()).font("x") == "Courier"
    assert pdfdraw.Style.of("CMBX12", ()).font("x") == "Times-Bold"
    assert pdfdraw.Style.of("ABCDEF+CMTT10", ()).font("x") == "Courier"
    assert pdfdraw.Style.of("ABCDEF+CMSLTT10", ()).font("x") == "Courier-Oblique"
    assert pdfdraw.Style.of("CMITT10", ()).font("x") == "Courier-Oblique"
    assert pdfdraw.Style.of("DejaVuSans-Oblique", ()).font("x") == "Helvetica-Oblique"


def test_a_heading_boxed_with_its_text_is_a_paragraph_of_its_own():
    """pdfminer's layout analysis may put a heading and the lines under it in one box (a
    document's title and its first paragraph, as reportlab's styles lay them out); the
    heading, of another size, is a paragraph, drawn at its own size, not run on into the
    text's lines."""
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph as Laid
    from reportlab.platypus import SimpleDocTemplate

    styles, out = getSampleStyleSheet(), io.BytesIO()
    body = "La estación de tren abrió en mayo y recibió a miles de viajeros. " * 3
    SimpleDocTemplate(out, pagesize=A4).build(
        [Laid("Informe anual de la estación", styles["Title"]), Laid(body, styles["BodyText"])]
    )
    data = out.getvalue()
    assert len(boxes(data)) == 1  # one box of the layout analysis: the case here
    read = files.read_file(".pdf", data)
    assert [p.runs for p in read.paragraphs] == [["Informe anual de la estación"], [body.strip()]]
    sizes: dict[int, list[str]] = {}
    for char in characters(translated(data)):
        sizes.setdefault(round(char.size), []).append(char.get_text())
    assert "".join(sizes[18]).replace(" ", "") == "INFORMEANUALDELAESTACIÓN"


def laid_lines(data: bytes) -> list[list[tuple[float, float, float]]]:
    """Each text box's lines: where each starts and ends, and its natural width (its
    words, single spaced, in Helvetica at its characters' size)."""
    from reportlab.pdfbase.pdfmetrics import stringWidth

    found = []
    for item in next(extract_pages(io.BytesIO(data))):
        if isinstance(item, LTTextBox):
            lines = []
            for line in item:
                size = next(char.size for char in line if isinstance(char, LTChar))
                natural = stringWidth(" ".join(line.get_text().split()), "Helvetica", size)
                lines.append((line.x0, line.x1, natural))
            found.append(lines)
    return found


def test_a_justified_paragraph_is_drawn_justified_and_a_ragged_one_ragged():
    """A paragraph whose lines but its last end at its box's right edge, widened (reportlab
    justifies by word spacing), is justified: its translation's lines but the last end at
    that edge too, its last line and a ragged paragraph's lines drawn single spaced. Of two
    lines, the first ends at the box's edge either way: its widened spaces tell."""
    from reportlab.lib.enums import TA_JUSTIFY
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.platypus import Paragraph as Laid
    from reportlab.platypus import SimpleDocTemplate

    body = getSampleStyleSheet()["BodyText"]
    justified = ParagraphStyle("justified", parent=body, alignment=TA_JUSTIFY)
    indented = ParagraphStyle("indented", parent=justified, firstLineIndent=18)
    long = "La estación de tren abrió en mayo y recibió a miles de viajeros del valle. " * 4
    short = (
        "El tren salió tarde y llegó de noche a la ciudad, donde lo esperaban los viajeros"
        " con sus maletas grandes."
    )
    out = io.BytesIO()
    SimpleDocTemplate(out, pagesize=A4).build(
        [Laid(long, indented), Laid(long, body), Laid(short, body), Laid(short, justified)]
    )
    source = out.getvalue()
    laid, _ = pdftext.read_pages(source, 1)
    read = pdfparagraphs._boxes(laid[0], 0)
    assert [r.box.align for r in read] == ["justify", "left", "left", "justify"]
    assert [r.box.indent for r in read] == [pytest.approx(18), 0, 0, 0]
    right = max(x1 for lines in laid_lines(source) for _, x1, _ in lines)
    drawn = laid_lines(translated(source))
    assert len(drawn) == 4
    for lines in (drawn[0], drawn[3]):
        assert len(lines) > 1 and all(abs(x1 - right) < 1 for _, x1, _ in lines[:-1])
        x0, x1, natural = lines[-1]
        assert x1 < right - 1 and x1 - x0 == pytest.approx(natural, abs=0.5)
    for x0, x1, natural in drawn[1] + drawn[2]:
        assert x1 - x0 == pytest.approx(natural, abs=0.5)
    assert drawn[0][0][0] == pytest.approx(drawn[0][1][0] + 18, abs=0.5)


def headed(c) -> None:
    """A title centred on the page, a date flush right, a paragraph of two lines and a short
    line at the left margin."""
    c.setFont("Helvetica-Bold", 16)
    c.drawCentredString(A4[0] / 2, 760, "Un informe breve")
    c.setFont("Helvetica", 10)
    c.drawRightString(A4[0] - 72, 730, "Madrid, mayo")
    c.drawString(72, 700, "La estación de tren abrió en mayo y recibió a miles de viajeros del")
    c.drawString(72, 688, "valle.")
    c.drawString(72, 660, "Nota breve.")


def titled() -> bytes:
    """reportlab's Title style (centred in its frame) over a paragraph of its BodyText."""
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph as Laid
    from reportlab.platypus import SimpleDocTemplate

    styles, out = getSampleStyleSheet(), io.BytesIO()
    body = "La estación de tren abrió en mayo y recibió a miles de viajeros. " * 3
    SimpleDocTemplate(out, pagesize=A4).build(
        [Laid("Informe anual de la estación", styles["Title"]), Laid(body, styles["BodyText"])]
    )
    return out.getvalue()


def extent(data: bytes, words: str) -> tuple[float, float]:
    """Where `words` (the first characters of the page that spell them, spaces apart)
    start and end."""
    shown = [char for char in characters(data) if char.get_text().strip()]
    text, wanted = "".join(char.get_text() for char in shown), words.replace(" ", "")
    found = shown[text.index(wanted) :][: len(wanted)]
    return found[0].x0, found[-1].x1


@pytest.mark.parametrize("longer", [True, False], ids=["longer", "shorter"])
@pytest.mark.parametrize(
    "build, lines",
    [
        (
            lambda: made(headed),
            {"Madrid, mayo": "right", "Un informe breve": "center", "Nota breve.": "left"},
        ),
        (titled, {"Informe anual de la estación": "center"}),
    ],
    ids=["canvas", "platypus"],
)
def test_a_line_centred_or_flush_right_alone_is_drawn_so_translated(build, lines, longer):
    """A paragraph of one line centred in the page's text (a title: reportlab's Title
    style, a canvas's drawCentredString) is drawn centred on the same centre, one flush
    right at its right edge (drawRightString) ends there, whether its translation is
    longer or shorter; a short line at the left margin stays at it."""
    source = build()
    read = files.read_file(".pdf", source)
    for paragraph in read.paragraphs:
        text = paragraph.text.upper() if longer else paragraph.text[: len(paragraph.text) // 2]
        paragraph.write([(0, text)])
    written = read.save()
    for words, align in lines.items():
        x0, x1 = extent(source, words)
        n = len(words) if longer else len(words) // 2
        tx0, tx1 = extent(written, words.upper()[:n] if longer else words[:n])
        assert abs((tx1 - tx0) - (x1 - x0)) > 10  # another width: where it is drawn tells
        if align == "center":
            assert (tx0 + tx1) / 2 == pytest.approx((x0 + x1) / 2, abs=1)
        elif align == "right":
            assert tx1 == pytest.approx(x1, abs=0.5)
        else:
            assert tx0 == pytest.approx(x0, abs=0.5)


def rewritten(source: bytes, translations: dict[str, str]) -> bytes:
    """`source` read, each paragraph written as `translations` gives its text (else as it
    was), and saved."""
    read = files.read_file(".pdf", source)
    for paragraph in read.paragraphs:
        paragraph.write([(0, translations.get(paragraph.text, paragraph.text))])
    return read.save()


COLUMNS = ((72, 285), (310, 523))  # the left and right edges of two columns of text
SPREAD = (
    "La estación de tren abrió en mayo y recibió a",
    "miles de viajeros del valle y de los pueblos de",
)


def in_columns(c) -> None:
    """A title centred on the page over two justified columns, each with a heading
    centred in it between two paragraphs, and a short line at the right column's left
    edge."""
    c.setFont("Helvetica-Bold", 16)
    c.drawCentredString(A4[0] / 2, 780, "Un informe breve")
    for top in (740, 670):
        for left, right in COLUMNS:
            for number, words in enumerate(SPREAD):
                stretched(c, left, top - 12 * number, words, right, 10, "Helvetica")
            c.setFont("Helvetica", 10)
            c.drawString(left, top - 24, "la sierra.")
    c.setFont("Helvetica-Bold", 11)
    c.drawCentredString(sum(COLUMNS[0]) / 2, 690, "Primera parte")
    c.drawCentredString(sum(COLUMNS[1]) / 2, 690, "Segunda parte")
    c.setFont("Helvetica", 10)
    c.drawString(COLUMNS[1][0], 610, "Fin del informe.")


@pytest.mark.parametrize("longer", [True, False], ids=["longer", "shorter"])
def test_a_line_centred_alone_in_its_column_is_drawn_centred_in_it(longer):
    """A heading of one line centred in its column of text (not on the page: the page's
    text spans two columns) is drawn centred in that column, its translation longer or
    shorter; the page's title stays centred on the page, a short line at the right
    column's left edge stays there."""
    translations = {
        "Primera parte": "The first part of the report" if longer else "Part one",
        "Segunda parte": "The second part of the report" if longer else "Part two",
        "Un informe breve": "A short report on the station" if longer else "Report",
        "Fin del informe.": "The end of the report on the station." if longer else "End.",
    }
    source = made(in_columns)
    written = rewritten(source, translations)
    centres = {
        "Primera parte": sum(COLUMNS[0]) / 2,
        "Segunda parte": sum(COLUMNS[1]) / 2,
        "Un informe breve": A4[0] / 2,
    }
    for words, centre in centres.items():
        x0, x1 = extent(source, words)
        tx0, tx1 = extent(written, translations[words])
        assert abs((tx1 - tx0) - (x1 - x0)) > 10  # another width: where it is drawn tells
        assert (tx0 + tx1) / 2 == pytest.approx(centre, abs=1)
    assert extent(written, translations["Fin del informe."])[0] == pytest.approx(310, abs=0.5)


CELLS = (72, 232, 312, 412)  # the left and right edges of a table's three columns
ROWS = (("Estación", "Línea", "Viajeros"), ("Norte", "A", "12.500"), ("Sur del valle", "B", "3.75"))
TABLED = "La tabla siguiente da los viajeros de cada estación del valle en el año pasado."


def ruled(c) -> None:
    """A paragraph over a table whose cells are drawn rectangles: its headings centred in
    their cells, its last column's numbers flush right (6 points from the cell's border),
    its other cells' text from their left (6 points in)."""
    c.setFont("Helvetica", 10)
    c.drawString(72, 760, TABLED)
    for row, cells in enumerate(ROWS):
        top = 720 - 20 * row
        for column, words in enumerate(cells):
            left, right = CELLS[column], CELLS[column + 1]
            c.rect(left, top - 20, right - left, 20)
            if row == 0:
                c.drawCentredString((left + right) / 2, top - 14, words)
            elif column == len(cells) - 1:
                c.drawRightString(right - 6, top - 14, words)
            else:
                c.drawString(left + 6, top - 14, words)


def gridded() -> bytes:
    """The same table laid out by reportlab's Table (its grid drawn as lines, its cells
    padded 6 points) under the same paragraph."""
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph as Laid
    from reportlab.platypus import SimpleDocTemplate, Table, TableStyle

    widths = [right - left for left, right in itertools.pairwise(CELLS)]
    table = Table(ROWS, colWidths=widths)
    table.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.5, "black"),
                ("ALIGN", (0, 0), (-1, 0), "CENTER"),
                ("ALIGN", (-1, 1), (-1, -1), "RIGHT"),
            ]
        )
    )
    out = io.BytesIO()
    body = getSampleStyleSheet()["BodyText"]
    SimpleDocTemplate(out, pagesize=A4).build([Laid(TABLED, body), table])
    return out.getvalue()


def cell_edges(data: bytes, words: str) -> tuple[float, float]:
    """The left and right edges of the cell `words` stand in: the nearest drawing either
    side of them (a rectangle's side, a line) that spans their height."""
    from pdfminer.layout import LTCurve

    x0, x1 = extent(data, words)
    laid = next(extract_pages(io.BytesIO(data)))
    y = next(char.y0 for char in characters(data) if char.x0 == x0)
    sides = [
        side
        for item in laid
        if isinstance(item, LTCurve) and item.y0 <= y <= item.y1
        for side in {item.x0, item.x1}
    ]
    return max(side for side in sides if side <= x0), min(side for side in sides if side >= x1)


@pytest.mark.parametrize("longer", [True, False], ids=["longer", "shorter"])
@pytest.mark.parametrize("build", [lambda: made(ruled), gridded], ids=["rectangles", "grid"])
def test_a_line_centred_or_flush_right_in_a_table_s_cell_is_drawn_so_in_it(build, longer):
    """A table's heading centred in its cell (a drawn rectangle, a grid's lines around it)
    is drawn centred in the cell and within it, a number flush right in its cell ends where
    it ended, and a cell's text at its left starts where it started, whether the
    translation is longer or shorter."""
    translations = {
        "Estación": "Name of the station" if longer else "Stop",
        "Viajeros": "Passengers carried" if longer else "Pay",
        "12.500": "12,500 in all" if longer else "12k",
        "Norte": "The northern station" if longer else "N",
    }
    source = build()
    written = rewritten(source, translations)
    for words in ("Estación", "Viajeros"):
        left, right = cell_edges(source, words)
        x0, x1 = extent(source, words)
        assert (x0 + x1) / 2 == pytest.approx((left + right) / 2, abs=0.5)  # centred: the case
        tx0, tx1 = extent(written, translations[words])
        assert abs((tx1 - tx0) - (x1 - x0)) > 10
        assert (tx0 + tx1) / 2 == pytest.approx((left + right) / 2, abs=1)
        assert left < tx0 and tx1 < right
    tx0, tx1 = extent(written, translations["12.500"])
    assert (
        tx1 == pytest.approx(extent(source, "12.500")[1], abs=0.5)
        and tx0 > cell_edges(source, "12.500")[0]
    )
    assert extent(written, translations["Norte"])[0] == pytest.approx(
        extent(source, "Norte")[0], abs=0.5
    )


def one_row(c) -> float:
    """A paragraph across the text's width (72 to 523) over a table of one row whose
    middle cell's text, at its left (6 points in), is by chance centred on the page's
    text: where that text starts."""
    from reportlab.pdfbase.pdfmetrics import stringWidth

    stretched(c, 72, 760, WIDE + " pueblos de la sierra", 523, 10, "Helvetica")
    c.setFont("Helvetica", 10)
    c.drawString(72, 748, "y del río.")
    words = "el tren de la tarde"
    start = (72 + 523) / 2 - stringWidth(words, "Helvetica", 10) / 2
    for left, right in ((72, start - 6), (start - 6, 440), (440, 523)):
        c.rect(left, 700, right - left, 20)
    c.drawString(78, 706, "Salida")
    c.drawString(start, 706, words)
    c.drawString(446, 706, "Llegada")
    return start


def test_a_line_at_its_cell_s_left_is_told_by_its_cell_not_the_page():
    """A line at its cell's left edge whose centre is the page's text's stays at the left,
    its translation shorter: a cell narrower than the page's text tells its line's
    alignment alone."""
    starts: list[float] = []
    source = made(lambda c: starts.append(one_row(c)))
    written = rewritten(source, {"el tren de la tarde": "the train"})
    assert extent(written, "the train")[0] == pytest.approx(starts[0], abs=0.5)


def test_a_cell_is_the_nearest_border_either_side_spanning_the_line():
    """A line's cell: the nearest ruling on either side spanning its height, or the sides
    of a rectangle around it; none where a side has none, or where the borders are drawn
    tight round its text (a highlight)."""
    box = pdfdraw.Box(100, 500, 160, 510, 502, 502, 10, 12, [])
    rulings = [(50, 495, 50.5, 515), (90, 495, 90.5, 515), (200, 495, 200.5, 515)]
    assert pdfalone._cell(box, 160, rulings) == (90.25, 200.25)
    assert pdfalone._cell(box, 160, [*rulings, (170, 505, 170.5, 515)]) == (90.25, 200.25)
    assert pdfalone._cell(box, 160, [(80, 495, 300, 515)]) == (80, 300)
    assert pdfalone._cell(box, 160, rulings[:2]) is None
    assert pdfalone._cell(box, 160, [(99, 499, 161, 511)]) is None


@pytest.mark.parametrize("longer", [True, False], ids=["longer", "shorter"])
def test_a_line_alone_on_its_page_centred_on_it_is_drawn_centred(longer):
    """A page of one line centred on it (a cover's title) has no other text to tell its
    column: it is drawn centred on the page."""
    source = made(
        lambda c: (
            c.setFont("Helvetica-Bold", 24),
            c.drawCentredString(A4[0] / 2, 500, "Informe anual"),
        )
    )
    translation = "The annual report of the station" if longer else "Report"
    tx0, tx1 = extent(rewritten(source, {"Informe anual": translation}), translation)
    assert (tx0 + tx1) / 2 == pytest.approx(A4[0] / 2, abs=1)


WIDE = "La estación de tren abrió en mayo y recibió a miles de viajeros del valle y de los"
FULL = "El tren salió tarde y llegó de noche a la ciudad, donde lo esperaban con sus maletas"


def short_lines(c) -> None:
    """Left-aligned lines of one line each under a paragraph reaching the right margin: a
    short one at the margin, two list items, an indented one, and a full line set 4
    points in from either margin (its centre the text's, but it starts no clearer of the
    margin than a list's mark would put it)."""
    stretched(c, 72, 760, WIDE + " pueblos de la sierra", 523, 10, "Helvetica")
    c.setFont("Helvetica", 10)
    c.drawString(72, 748, "y del río.")
    c.drawString(72, 720, "Nota breve.")
    c.drawString(90, 700, "\u2013 uno de los trenes")
    c.drawString(90, 688, "\u2013 otro")
    c.drawString(108, 660, "Un párrafo sangrado de una línea.")
    stretched(c, 76, 630, FULL + " los viajeros y", 519, 10, "Helvetica")


def test_a_short_line_at_its_margin_or_indented_stays_left_aligned():
    """Lines of one line each that stand at the left margin, a list's indent or a
    paragraph's indent, or span the text's width but for a few points either side, are
    drawn from where they started, their translations shorter or longer."""
    translations = {
        "Nota breve.": "A short note on the station and its trains.",
        "\u2013 uno de los trenes": "\u2013 one",
        "\u2013 otro": "\u2013 another one of the trains of the valley",
        "Un párrafo sangrado de una línea.": "One line.",
    }
    translations[FULL + " los viajeros y"] = "The train left late."
    source = made(short_lines)
    written = rewritten(source, translations)
    for words, translation in translations.items():
        assert extent(written, translation)[0] == pytest.approx(extent(source, words)[0], abs=0.5)


def two_columns_in_a_box(c) -> float:
    """A heading over a table of two columns whose lines pdfminer's layout analysis puts in
    one box (the heading's right edge meets the right column's): the right column's left
    edge."""
    from reportlab.pdfbase.pdfmetrics import stringWidth

    rows = [
        ("importar un módulo", "carga un módulo"),
        ("incluir un fichero", "copia el texto de un fichero"),
    ]
    column = 72 + max(stringWidth(left, "Helvetica", 9) for left, _ in rows) + 14
    heading = "Estructura de un programa"
    end = column + stringWidth(rows[0][1], "Helvetica", 9)
    c.setFont("Helvetica-Bold", 12 * (end - 72) / stringWidth(heading, "Helvetica-Bold", 12))
    c.drawString(72, 700, heading)
    c.setFont("Helvetica", 9)
    for number, (left, right) in enumerate(rows):
        c.drawString(72, 689 - 10 * number, left)
        c.drawString(column, 689 - 10 * number, right)
    return column


def test_lines_side_by_side_in_a_box_are_paragraphs_each_kept_to_its_column():
    """Lines beside one another (a table's cells in one box of the layout analysis) are
    not one paragraph run on from one to the next; a cell's translation, wider than its
    source, stays left of the column beside it."""
    columns: list[float] = []
    source = made(lambda c: columns.append(two_columns_in_a_box(c)))
    assert len(boxes(source)) == 1  # one box of the layout analysis: the case here
    read = files.read_file(".pdf", source)
    assert sorted(p.text for p in read.paragraphs) == [
        "Estructura de un programa",
        "carga un módulo",
        "copia el texto de un fichero",
        "importar un módulo",
        "incluir un fichero",
    ]
    written = [c for c in characters(translated(source)) if c.get_text().strip()]
    left = [c for c in written if c.x0 < columns[0] - 1 and c.y0 < 690]
    assert "".join(c.get_text() for c in sorted(left, key=lambda c: (-c.y0, c.x0))) == (
        "IMPORTARUNMÓDULOINCLUIRUNFICHERO"
    )
    assert max(c.x1 for c in left) <= columns[0]


def listed(c) -> None:
    """A list whose items' text runs on under it (a hanging indent), each item's lines
    under its text a box apart from its first line to pdfminer's layout analysis; then a
    paragraph under the last item after a gap, one beside it in another column, and an
    item with its own mark where the item before's text starts."""
    c.setFont("Helvetica", 10)
    c.drawString(72, 700, "Los ficheros creados son:")
    for mark, x, y, text in [
        (
            True,
            82,
            682,
            "una tabla de pares de nombres y espacios de XML, que lee al arrancar, a sus",
        ),
        (False, 82, 669, "tipos MIME)"),
        (True, 82, 651, "otra tabla de los iconos de cada tipo, que el programa lee, y"),
        (True, 92, 638, "sus alias"),
        (False, 92, 605, "Un párrafo aparte, bajo el elemento de la lista."),
        (False, 300, 592, "Texto de otra columna"),
    ]:
        if mark:  # its mark 10 points left of its text
            c.drawString(x - 10, y, "\u2013")
        c.drawString(x, y, text)


def test_a_list_item_s_lines_boxed_apart_under_its_text_are_one_paragraph():
    """The lines of a list item under its text (not under its mark) are the rest of the
    item, though the layout analysis boxes them apart: translated with it as one text and
    drawn under its text; a paragraph after a gap, one of another column and an item with
    its own mark stay paragraphs of their own."""
    source = made(listed)
    assert "tipos MIME)" in boxes(source)  # a box of its own to the layout analysis
    read = files.read_file(".pdf", source)
    assert [p.text for p in read.paragraphs] == [
        "Los ficheros creados son:",
        "\u2013 una tabla de pares de nombres y espacios de XML, que lee al arrancar, a sus"
        " tipos MIME)",
        "\u2013 otra tabla de los iconos de cada tipo, que el programa lee, y",
        "\u2013 sus alias",
        "Un párrafo aparte, bajo el elemento de la lista.",
        "Texto de otra columna",
    ]
    written = [c for c in characters(translated(source)) if c.get_text().strip()]
    item = [c for c in written if 660 < c.y0 < 690]
    rows: dict[float, list[LTChar]] = {}
    for char in sorted(item, key=lambda c: c.x0):
        rows.setdefault(round(char.matrix[5]), []).append(char)
    first, *under = (rows[row] for row in sorted(rows, reverse=True))
    assert round(first[0].x0) == 72 and under and {round(row[0].x0) for row in under} == {82}
    assert "".join(c.get_text() for row in [first, *under] for c in row).endswith("TIPOSMIME)")


def stretched(c, x: float, y: float, words: str, right: float, size=10, font="Times-Roman"):
    """`words` from `x` on baseline `y`, their spaces widened by word spacing (`Tw`) to end
    at `right`, as a justified line is set; then 10 pt Times Roman, unspaced."""
    from reportlab.pdfbase.pdfmetrics import stringWidth

    natural = stringWidth(words, font, size)
    assert 0 < right - x - natural < 15  # a line's worth of words
    text = c.beginText(x, y)
    text.setFont(font, size)
    text.setWordSpace((right - x - natural) / words.count(" "))
    text.textOut(words)
    text.setWordSpace(0)
    c.drawText(text)
    c.setFont("Times-Roman", 10)


def flowing(c) -> None:
    """Paragraphs whose first line is indented, set as TeX sets them (10 pt lines 12 points
    apart, a column from 72 to 320 and one from 340): one of two lines, which the layout
    analysis boxes apart (neither their left nor their right edges meet); then lines under
    an indented first line that reaches the column's right edge after a gap of two lines,
    under a short one, under a heading of another size (one of its leadings below it), in
    the other column, and under the other column's."""
    c.setFont("Times-Roman", 10)
    stretched(c, 90, 700, "La estación de tren abrió en mayo y recibió a los viajeros", 320)
    c.drawString(72, 688, "miles de viajeros del valle.")
    stretched(c, 90, 660, "El tren salió tarde y llegó de noche a la estación del norte", 320)
    c.drawString(72, 636, "ciudad, tras una parada larga.")
    c.drawString(90, 610, "Un párrafo de una línea corta.")
    c.drawString(72, 598, "Otro párrafo debajo de ella.")
    stretched(c, 90, 560, "Un título grande de la página primera", 320, 14, "Times-Bold")
    c.drawString(72, 543, "Texto bajo el título grande.")
    stretched(c, 90, 520, "Texto de la columna izquierda que llega al borde de ella", 320)
    c.drawString(340, 508, "Texto de la columna derecha.")
    stretched(c, 358, 480, "La columna derecha llega a su borde derecho y", 560)
    c.drawString(72, 468, "La columna izquierda sigue.")


def test_a_paragraph_s_lines_boxed_apart_under_its_indented_first_line_are_one():
    """The lines of a paragraph under its indented first line, which the layout analysis
    boxes apart from it, are the rest of it: translated with it as one text and drawn at
    its size, its first line indented; lines after a gap, under a short line, under a
    heading of another size or in another column stay paragraphs of their own."""
    source = made(flowing)
    assert "miles de viajeros del valle." in boxes(source)  # a box of its own: the case here
    read = files.read_file(".pdf", source)
    assert [p.text for p in read.paragraphs] == [
        "La estación de tren abrió en mayo y recibió a los viajeros miles de viajeros del valle.",
        "El tren salió tarde y llegó de noche a la estación del norte",
        "ciudad, tras una parada larga.",
        "Un párrafo de una línea corta.",
        "Otro párrafo debajo de ella.",
        "Un título grande de la página primera",
        "Texto bajo el título grande.",
        "Texto de la columna izquierda que llega al borde de ella",
        "La columna izquierda sigue.",
        "Texto de la columna derecha.",
        "La columna derecha llega a su borde derecho y",
    ]
    written = [c for c in characters(translated(source)) if c.get_text().strip()]
    paragraph = [c for c in written if c.y0 > 680]
    rows: dict[float, list[LTChar]] = {}
    for char in sorted(paragraph, key=lambda c: c.x0):
        rows.setdefault(round(char.matrix[5]), []).append(char)
    first, *under = (rows[row] for row in sorted(rows, reverse=True))
    assert round(first[0].x0) == 90 and under and {round(row[0].x0) for row in under} == {72}
    assert "".join(c.get_text() for row in [first, *under] for c in row).endswith("DELVALLE.")
    assert {round(c.size) for c in paragraph} == {10}


def test_a_first_line_indented_past_its_bound_is_no_paragraph_s_first_line(monkeypatch):
    """The lines under a line of one paragraph are taken into it where that line's indent
    is at most INDENT sizes: with the bound under the 18 points of the case above (1.5 sizes
    of 10 points: 15), they stay a paragraph of their own."""
    source = made(flowing)
    monkeypatch.setattr(pdfcontinued, "INDENT", 1.5)
    texts = [p.text for p in files.read_file(".pdf", source).paragraphs]
    assert texts[:2] == [
        "La estación de tren abrió en mayo y recibió a los viajeros",
        "miles de viajeros del valle.",
    ]


def marked(c) -> None:
    """Two list items whose mark, a bullet, is a character reportlab's Helvetica shows by a
    code the font's encoding maps to no character (pdfminer reads `(cid:127)`)."""
    c.setFont("Helvetica", 10)
    for y, text in [(700, "Primer elemento de la lista."), (686, "Segundo elemento.")]:
        c.drawString(72, y, "\u2022")
        c.drawString(82, y, text)


@pytest.mark.parametrize(
    "source",
    [
        made(marked),
        written_page(
            b"BT /F2 10 Tf 1 0 0 1 72 700 Tm <95> Tj /F1 10 Tf 1 0 0 1 82 700 Tm"
            b" (Primer elemento de la lista.) Tj /F2 10 Tf 1 0 0 1 72 686 Tm <95> Tj"
            b" /F1 10 Tf 1 0 0 1 82 686 Tm (Segundo elemento.) Tj ET"
        ),
    ],
    ids=["unmapped", "type3"],
)
def test_a_list_s_mark_that_cannot_be_drawn_again_stays_and_its_text_is_translated(source):
    """A list item's mark that cannot be drawn again (of an unmapped code, of a Type3 font)
    before its text: the mark stays as it was, where it was, and the item's text is read
    without it, translated and drawn where it stood, after it."""
    assert len(boxes(source)) == 1  # the two items in one box of the layout analysis
    read = files.read_file(".pdf", source)
    assert [p.text for p in read.paragraphs] == [
        "Primer elemento de la lista.",
        "Segundo elemento.",
    ]
    written = translated(source)
    mark = [(c.get_text(), c.fontname, c.bbox) for c in characters(source) if c.x0 < 80]
    assert (
        len(mark) == 2
        and [(c.get_text(), c.fontname, c.bbox) for c in characters(written) if c.x0 < 80] == mark
    )
    text = [c for c in characters(written) if c.x0 >= 80]
    assert "".join(c.get_text() for c in text).replace(" ", "") == (
        "PRIMERELEMENTODELALISTA.SEGUNDOELEMENTO."
    )
    assert min(c.x0 for c in text) == pytest.approx(82)


def test_a_mark_shown_by_the_operator_of_its_item_s_text_keeps_the_item_as_it_was():
    """A mark that cannot be drawn again shown by the same text operator as its item's
    text: taking the text out would take the mark too, so the item stays as it was."""

    def page(c):
        c.setFont("Helvetica", 10)
        c.drawString(72, 700, "\u2022 Hola.")

    source = made(page)
    assert files.read_file(".pdf", source).paragraphs == []
    assert translated(source) == source


@pytest.mark.parametrize(
    ("line", "marked"),
    [
        ("\u2022 Primer punto", True),
        ("  \u2013 Segundo punto", True),
        ("1. Introducción", True),
        ("12) Anexo", True),
        ("- guion y espacio", True),
        ("1.5 kilos de harina", False),
        ("-5 grados bajo cero", False),
        ("2026 fue un buen año", False),
        ("Hola", False),
    ],
)
def test_a_list_s_mark_is_told_from_text_that_starts_with_a_number_or_a_dash(line, marked):
    """A line that starts with a list's mark starts a paragraph (an item); a number or a dash
    that is the text's own (a quantity, a year, a negative number) does not."""
    assert bool(pdflines.LIST_MARK.match(line)) is marked
