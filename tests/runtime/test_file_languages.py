"""What a translated file says of its language (service.runtime.files.labels): each format's
declarations of the source language made the target's, those of another language kept; and
an EPUB 2 book's table of contents (toc.ncx) translated with its chapters."""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree

import docx
import pptx
import pytest
from helpers import CHAPTER, epub, growth
from odf import teletype
from odf.dc import Language, Title
from odf.namespaces import FONS, STYLENS
from odf.opendocument import OpenDocumentText, load
from odf.style import DefaultStyle, Style, TextProperties
from odf.text import P, Span

from service.runtime import files, languages
from service.runtime.files import labels
from service.runtime.files.labels import Relabel
from service.runtime.files.word import qn_w

SPANISH = {"Hola mundo.": "Hello world.", "Capítulo uno": "Chapter one", "Uno": "One"}


def translated(read: files.File, source: str = "es", target: str = "en") -> bytes:
    """`read` translated as /translate_file does: each text's known Spanish sentences in
    English (a stand-in for the model), the languages declared, the file saved."""
    for batch in read.batches(64):
        said = []
        for text in batch.texts:
            for spanish, english in SPANISH.items():
                text = text.replace(spanish, english)
            said.append(text)
        batch.write([{"hypotheses": [{"text": text}]} for text in said])
    read.declare(source, target)
    return read.save()


PAGE = (
    '<!DOCTYPE html>\n<html lang="es" xml:lang="es-ES"><head><title>Uno</title></head>'
    "<body><p LANG='ES_es'>Hola mundo.</p><p>Dijo <q lang=\"en\">hello</q>.</p>"
    '<p title="lang=es">Hola mundo.</p><!-- <p lang="es"> --></body></html>'
)


def test_an_html_page_declares_the_target_where_it_declared_the_source():
    written = translated(files.read_file(".html", PAGE.encode())).decode()
    assert written == (
        PAGE.replace("Hola mundo.", "Hello world.")
        .replace("Uno", "One")
        .replace('<html lang="es" xml:lang="es-ES">', '<html lang="en" xml:lang="en">')
        .replace("LANG='ES_es'", "LANG='en'")
    )  # the quoted English, an attribute's text and a comment as they were


@pytest.mark.parametrize(
    ("target", "declared", "said"),
    [
        ("en", "es-ES", "en"),
        ("fr", "es, en", "fr, en"),  # only the source's entry changes
        ("en", "es, en", "en"),  # each language once
        ("en", "de,  es_MX ,fr", "de,  en ,fr"),
        ("en", "de", "de"),  # no Spanish reader is named: it stays
    ],
)
def test_an_html_page_s_content_language_lists_the_target_where_it_listed_the_source(
    target, declared, said
):
    page = (
        f"<html><head><meta http-equiv='Content-Language' content='{declared}'>"
        f'<META CONTENT="{declared}" HTTP-EQUIV=content-language />'
        f'<meta name="description" content="es"></head><body><p>Hola mundo.</p></body></html>'
    )
    written = translated(files.read_file(".html", page.encode()), "es", target).decode()
    assert written == (
        page.replace("Hola mundo.", "Hello world.")
        .replace(f"content='{declared}'", f"content='{said}'")
        .replace(f'CONTENT="{declared}"', f'CONTENT="{said}"')
    )  # another meta's content is no language


def test_a_file_whose_languages_are_unknown_declares_what_it_did():
    read = files.read_file(".html", PAGE.encode())
    assert b'lang="es"' in translated(read, source="", target="en")


@pytest.mark.parametrize(
    ("source", "target", "tag"),
    [
        ("es", "en", "en"),
        ("spa_Latn", "zho_Hant", "zh-Hant"),  # NLLB's codes
        ("es_XX", "en_XX", "en"),  # mBART-50's
        ("spa", "fra", "fr"),  # a multilingual Marian's
        ("es", "pt_BR", "pt-BR"),
        ("es", "zt", "zh-Hant"),  # LibreTranslate's code
    ],
)
def test_a_model_s_codes_are_declared_as_bcp_47_tags(source, target, tag):
    assert languages.tag(target) == tag
    written = translated(files.read_file(".html", PAGE.encode()), source, target).decode()
    assert f'<html lang="{tag}" xml:lang="{tag}">' in written


def test_a_declaration_is_the_source_s_by_its_primary_subtag():
    relabel = Relabel("es", "en")
    assert [relabel.value(v) for v in ("es", "es-ES", "ES_mx", " es ")] == ["en"] * 4
    assert [relabel.value(v) for v in ("en", "est", "eu-ES", "", "x-es")] == [None] * 5


SPANISH_CHAPTER = CHAPTER.replace("<html ", '<html lang="es" xml:lang="es" ')


def test_an_epub_declares_the_target_in_its_documents_and_its_package():
    read = files.read_file(".epub", epub(SPANISH_CHAPTER, language="es-ES"))
    written = zipfile.ZipFile(io.BytesIO(translated(read)))
    package = written.read("OEBPS/content.opf").decode()
    assert "<dc:language>en</dc:language>" in package and "<dc:title>Libro</dc:title>" in package
    text = written.read("OEBPS/text/capítulo.xhtml").decode()
    assert '<html lang="en" xml:lang="en" xmlns=' in text and "<title>One</title>" in text


def test_an_epub_that_declares_no_language_keeps_its_package_as_it_was():
    read = files.read_file(".epub", epub())
    written = zipfile.ZipFile(io.BytesIO(translated(read)))
    assert written.read("OEBPS/content.opf") == zipfile.ZipFile(io.BytesIO(epub())).read(
        "OEBPS/content.opf"
    )


def test_an_epub_package_keeps_the_language_of_its_metadata():
    """The package's xml:lang is the language of its metadata's text (a title, an author),
    which is not translated: it stays Spanish while dc:language, the book's, says English."""
    package = (
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" xml:lang="es">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        '<dc:title xml:lang="es-ES">Libro</dc:title><dc:creator>Ana Pérez</dc:creator>'
        "<dc:language>es</dc:language></metadata></package>"
    )
    relabelled = labels.in_package(package, [Relabel("es", "en")])
    assert relabelled == package.replace("<dc:language>es<", "<dc:language>en<")


def test_an_epub_package_s_language_is_relabelled_in_a_time_linear_in_its_length():
    """`dc:language` and its text were matched as white space, a value and white space, each
    of any length: a package whose language element held white space before a comment (valid
    XML) took a time cubic in it, 1 s for 1,000 spaces, minutes for a few thousand, on a
    thread of the front; its value, spaces kept around it, is relabelled as before."""
    relabel = [Relabel("es", "en")]

    def relabelled(spaces: int) -> None:
        language = f"<dc:language>{' ' * spaces}<!---->es</dc:language>"
        labels.in_package(f"<package>{language * 100}</package>", relabel)

    assert growth(relabelled, 100, 400) < 8  # linear: about 4
    spaced = "<dc:language xml:lang='es'>\n  ES_es \n</dc:language>"
    assert labels.in_package(spaced, relabel) == spaced.replace("ES_es", "en")


NCX = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1" xml:lang="es">'
    '<head><meta name="dtb:uid" content="libro-1"/></head>'
    "<docTitle><text>Capítulo uno</text></docTitle>"
    "<docAuthor><text>Hola mundo.</text></docAuthor>"
    '<navMap><navPoint id="p1" playOrder="1"><navLabel><text>Capítulo uno</text></navLabel>'
    '<content src="text/cap%C3%ADtulo.xhtml"/>'
    '<navPoint id="p2" playOrder="2"><navLabel><text>Hola mundo. &amp; Uno</text></navLabel>'
    '<content src="text/cap%C3%ADtulo.xhtml#hola"/></navPoint></navPoint>'
    '<navPoint id="p3" playOrder="3"><navLabel><text> </text></navLabel>'
    '<content src="text/cap%C3%ADtulo.xhtml#fin"/></navPoint></navMap></ncx>'
)


def test_an_epub_2_table_of_contents_is_translated_its_entries_kept():
    """Before, toc.ncx was kept as it was: a reader's list of contents stayed Spanish."""
    read = files.read_file(".epub", epub(SPANISH_CHAPTER, NCX, language="es"))
    labels = ["Capítulo uno", "Capítulo uno", "Hola mundo. &amp; Uno"]
    assert [p.text for p in read.paragraphs] == [SPANISH_CHAPTER, *labels]  # manifest order
    written = zipfile.ZipFile(io.BytesIO(translated(read)))
    toc = written.read("OEBPS/toc.ncx").decode()
    ElementTree.fromstring(toc.encode())  # still XML
    assert toc == (
        NCX.replace('xml:lang="es"', 'xml:lang="en"')
        .replace("<text>Capítulo uno</text>", "<text>Chapter one</text>")
        .replace("Hola mundo. &amp; Uno</text>", "Hello world. &amp; One</text>")
    )  # the author, the entries' targets, their order and ids as they were


def test_an_epub_2_table_of_contents_label_written_as_cdata_is_translated():
    """A label written as a CDATA section (`<text><![CDATA[...]]></text>`) was read as
    markup holding no text, and stayed Spanish; in XML it is text, written back escaped."""
    cdata = NCX.replace(
        "<navLabel><text>Capítulo uno</text>", "<navLabel><text><![CDATA[Capítulo uno]]></text>"
    ).replace("Hola mundo. &amp; Uno</text>", "<![CDATA[Hola mundo. & Uno]]></text>")
    read = files.read_file(".epub", epub(SPANISH_CHAPTER, cdata, language="es"))
    labels = ["Capítulo uno", "Capítulo uno", "Hola mundo. &amp; Uno"]
    assert [p.text for p in read.paragraphs] == [SPANISH_CHAPTER, *labels]
    toc = zipfile.ZipFile(io.BytesIO(translated(read))).read("OEBPS/toc.ncx").decode()
    texts = [e.text for e in ElementTree.fromstring(toc.encode()).iter() if e.tag.endswith("text")]
    assert texts == ["Chapter one", "Hola mundo.", "Chapter one", "Hello world. & One", " "]


def test_an_epub_whose_table_of_contents_is_listed_but_absent_is_translated():
    """A package listing a toc.ncx the archive does not hold (left by a converter) was
    refused since the table of contents is read; it was translated before, and is: what
    is not there is not translated, the book's other files are."""
    book, out = zipfile.ZipFile(io.BytesIO(epub(SPANISH_CHAPTER, NCX))), io.BytesIO()
    with zipfile.ZipFile(out, "w") as written:
        for name in book.namelist():
            if name != "OEBPS/toc.ncx":
                written.writestr(name, book.read(name))
    read = files.read_file(".epub", out.getvalue())
    assert [p.text for p in read.paragraphs] == [SPANISH_CHAPTER]
    saved = zipfile.ZipFile(io.BytesIO(translated(read)))
    assert "OEBPS/toc.ncx" not in saved.namelist()
    assert "<title>One</title>" in saved.read("OEBPS/text/capítulo.xhtml").decode()


def language_of(properties) -> dict[str, str]:
    """A w:lang's attributes by their local names, or {} where there is none."""
    lang = properties.find(qn_w("lang")) if properties is not None else None
    return {} if lang is None else {k.rpartition("}")[2]: v for k, v in lang.attrib.items()}


def with_language(run_properties, **values: str) -> None:
    lang = run_properties.makeelement(qn_w("lang"), {qn_w(k): v for k, v in values.items()})
    run_properties.append(lang)


def test_a_docx_declares_the_target_in_its_runs_and_styles_east_asian_and_bidi_kept():
    document = docx.Document()
    spanish = document.add_paragraph().add_run("Hola mundo.")
    english = document.add_paragraph().add_run("Hello.")  # quoted: its own language
    with_language(spanish._r.get_or_add_rPr(), val="es-ES", eastAsia="es-ES", bidi="ar-SA")
    with_language(english._r.get_or_add_rPr(), val="en-GB")
    defaults = document.styles.element.find(f"{qn_w('docDefaults')}/{qn_w('rPrDefault')}")
    run_defaults = defaults.find(qn_w("rPr"))
    run_defaults.remove(run_defaults.find(qn_w("lang")))
    with_language(run_defaults, val="es-ES", eastAsia="zh-CN")
    out = io.BytesIO()
    document.save(out)
    back = docx.Document(io.BytesIO(translated(files.read_file(".docx", out.getvalue()))))
    assert [p.text for p in back.paragraphs] == ["Hello world.", "Hello."]
    said = [language_of(p.runs[0]._r.rPr) for p in back.paragraphs]
    assert said == [{"val": "en", "eastAsia": "es-ES", "bidi": "ar-SA"}, {"val": "en-GB"}]
    styles = back.styles.element.find(f"{qn_w('docDefaults')}/{qn_w('rPrDefault')}")
    assert language_of(styles.find(qn_w("rPr"))) == {"val": "en", "eastAsia": "zh-CN"}


def test_a_pptx_declares_the_target_in_its_runs_and_their_alternative():
    deck = pptx.Presentation()
    title = deck.slides.add_slide(deck.slide_layouts[5]).shapes.title
    title.text = "Hola mundo."
    properties = title.text_frame.paragraphs[0].runs[0]._r.get_or_add_rPr()
    properties.set("lang", "es-ES")
    properties.set("altLang", "es-MX")
    quoted = title.text_frame.add_paragraph().add_run()
    quoted.text = "Hello."
    quoted._r.get_or_add_rPr().set("lang", "en-US")
    out = io.BytesIO()
    deck.save(out)
    back = pptx.Presentation(io.BytesIO(translated(files.read_file(".pptx", out.getvalue()))))
    paragraphs = back.slides[0].shapes.title.text_frame.paragraphs
    (translated_run,), (kept,) = paragraphs[0].runs, paragraphs[1].runs
    assert translated_run.text == "Hello world."
    assert (translated_run._r.rPr.get("lang"), translated_run._r.rPr.get("altLang")) == ("en", "en")
    assert kept._r.rPr.get("lang") == "en-US"


def without_properties(package) -> None:
    """A python-docx or python-pptx package left without its document properties."""
    rels = getattr(package, "rels", None) or package._rels
    for rid in [r for r, rel in rels.items() if rel.reltype == labels.CORE_PROPERTIES]:
        rels.pop(rid)


@pytest.mark.parametrize("library", [docx, pptx])
@pytest.mark.parametrize(("declared", "said"), [("es-ES", "en"), ("en-US", "en-US"), ("", "")])
def test_an_office_file_s_properties_declare_the_target_where_they_declared_the_source(
    library, declared, said
):
    if library is docx:
        opened, suffix = docx.Document, ".docx"
        document = opened()
        document.add_paragraph("Hola mundo.")
    else:
        opened, suffix = pptx.Presentation, ".pptx"
        document = opened()
        document.slides.add_slide(document.slide_layouts[5]).shapes.title.text = "Hola mundo."
    document.core_properties.title = "Libro"  # not translated
    if declared:
        document.core_properties.language = declared
    out = io.BytesIO()
    document.save(out)
    saved = opened(io.BytesIO(translated(files.read_file(suffix, out.getvalue()))))
    assert (saved.core_properties.language, saved.core_properties.title) == (said, "Libro")


@pytest.mark.parametrize(("library", "suffix"), [(docx, ".docx"), (pptx, ".pptx")])
def test_an_office_file_without_properties_is_given_none(library, suffix):
    """python-docx and python-pptx make default properties (a title "Word Document", an
    author "python-docx") for a file asked for those it does not have."""
    document = library.Document() if library is docx else library.Presentation()
    without_properties(document.part.package)
    out = io.BytesIO()
    document.save(out)
    saved = translated(files.read_file(suffix, out.getvalue()))
    assert "docProps/core.xml" not in zipfile.ZipFile(io.BytesIO(saved)).namelist()


# content types the Office libraries read a part by: given another, the part is held as bytes
STYLES_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"
CORE_TYPE = "application/vnd.openxmlformats-package.core-properties+xml"


@pytest.mark.parametrize(
    ("suffix", "typed", "part"),
    [
        (".docx", STYLES_TYPE, "word/styles.xml"),
        (".docx", CORE_TYPE, "docProps/core.xml"),
        (".pptx", CORE_TYPE, "docProps/core.xml"),
    ],
)
def test_an_office_part_of_another_content_type_is_kept_as_it_was(suffix, typed, part):
    """The styles or document properties typed as plain XML (no override of their content
    type: python-docx and python-pptx hold them as bytes) stopped the file's declaration
    with an AttributeError, once every paragraph was translated; such a part is not read as
    the styles or properties, and stays as it was."""
    if suffix == ".docx":
        document = docx.Document()
        document.add_paragraph("Hola mundo.").runs[0]._r.get_or_add_rPr()
    else:
        document = pptx.Presentation()
        document.slides.add_slide(document.slide_layouts[5]).shapes.title.text = "Hola mundo."
    document.core_properties.language = "es-ES"
    out, retyped = io.BytesIO(), io.BytesIO()
    document.save(out)
    original = zipfile.ZipFile(io.BytesIO(out.getvalue()))
    with zipfile.ZipFile(retyped, "w") as written:
        for name in original.namelist():
            body = original.read(name)
            if name == "[Content_Types].xml":
                body = body.replace(typed.encode(), b"application/xml")
            written.writestr(name, body)
    kept = original.read(part)
    saved = zipfile.ZipFile(io.BytesIO(translated(files.read_file(suffix, retyped.getvalue()))))
    assert saved.read(part) == kept
    text = {".docx": "word/document.xml", ".pptx": "ppt/slides/slide1.xml"}[suffix]
    assert b"Hello world." in saved.read(text)


@pytest.mark.parametrize(("target", "country"), [("en", None), ("en_GB", "GB")])
def test_an_odt_declares_the_target_in_its_styles_language_and_country(target, country):
    document = OpenDocumentText()
    default = DefaultStyle(family="paragraph")
    default.addElement(TextProperties(language="es", country="ES", languageasian="zh"))
    document.styles.addElement(default)
    quote = Style(name="Quote", family="text")
    quote.addElement(TextProperties(language="en", country="US"))
    document.styles.addElement(quote)
    spoken = Style(name="P1", family="paragraph")
    spoken.addElement(TextProperties(fontweight="bold", language="es", country="MX"))
    document.automaticstyles.addElement(spoken)
    document.text.addElement(P(stylename=spoken, text="Hola mundo."))
    quoted = P()
    quoted.addElement(Span(stylename=quote, text="Hello."))
    document.text.addElement(quoted)
    out = io.BytesIO()
    document.write(out)
    back = load(io.BytesIO(translated(files.read_file(".odt", out.getvalue()), "es", target)))
    said = sorted(
        (p.getAttrNS(FONS, "language"), p.getAttrNS(FONS, "country") or "")
        for p in back.getElementsByType(TextProperties)
    )
    assert said == sorted([("en", "US"), *[("en", country or "")] * 2])
    assert [
        p.getAttribute("languageasian")
        for p in back.getElementsByType(TextProperties)
        if p.getAttribute("languageasian")
    ] == ["zh"]
    assert [teletype.extractText(p) for p in back.getElementsByType(P)] == [
        "Hello world.",
        "Hello.",
    ]


@pytest.mark.parametrize(("target", "tag"), [("en", "en"), ("zho_Hant", "zh-Hant")])
def test_an_odt_s_language_tag_declares_the_target_with_its_language(target, tag):
    """LibreOffice writes a language that fo:language and fo:country cannot say (Latin
    American Spanish, es-419) as style:rfc-language-tag too, and reads that tag first: the
    translation declared English in fo:language and Spanish in the tag, and LibreOffice took
    it as Spanish. The tag is the target's wherever it named the source's; another
    language's (a quotation's) and the Asian scripts' stay."""
    document = OpenDocumentText()
    default = DefaultStyle(family="paragraph")
    default.addElement(
        TextProperties(
            language="es", country="419", rfclanguagetag="es-419", rfclanguagetagasian="zh-Hant"
        )
    )
    document.styles.addElement(default)
    quote = Style(name="Quote", family="text")
    quote.addElement(TextProperties(language="en", country="US", rfclanguagetag="en-US"))
    document.styles.addElement(quote)
    document.text.addElement(P(text="Hola mundo."))
    out = io.BytesIO()
    document.write(out)
    back = load(io.BytesIO(translated(files.read_file(".odt", out.getvalue()), "es", target)))
    said = [
        (p.getAttrNS(FONS, "language"), p.getAttrNS(STYLENS, "rfc-language-tag"))
        for p in back.getElementsByType(TextProperties)
    ]
    assert sorted(said) == sorted([(tag.partition("-")[0], tag), ("en", "en-US")])
    asian = [
        p.getAttrNS(STYLENS, "rfc-language-tag-asian")
        for p in back.getElementsByType(TextProperties)
    ]
    assert "zh-Hant" in asian


@pytest.mark.parametrize(("declared", "said"), [("es-ES", "en-GB"), ("ca", "ca")])
def test_an_odt_s_properties_declare_the_target_where_they_declared_the_source(declared, said):
    document = OpenDocumentText()
    document.meta.addElement(Language(text=declared))
    document.meta.addElement(Title(text="Libro"))
    document.text.addElement(P(text="Hola mundo."))
    out = io.BytesIO()
    document.write(out)
    back = load(io.BytesIO(translated(files.read_file(".odt", out.getvalue()), "es", "en_GB")))
    assert [str(e) for e in back.getElementsByType(Language)] == [said]
    assert [str(e) for e in back.getElementsByType(Title)] == ["Libro"]
