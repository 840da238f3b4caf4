"""A .docx's content controls bound to custom XML (service.runtime.files.bindings): a
plain-text control's translation written into the node it is bound to, so that Word, which
fills the control from that node when it opens the file, shows the translation; any other
bound control the translation changed loses its binding and keeps its translation."""

from __future__ import annotations

import io
import zipfile

import docx
import pytest
from helpers import growth, upper_cased
from lxml import etree

from service.runtime import files
from service.runtime.files.bindings import CUSTOM_XML_PROPS, _followed
from service.runtime.files.word import qn_w

STORE = "{5A1B2C3D-0000-4000-8000-00000000ABCD}"
CORE = "{6C3C8BC8-F283-45AE-878A-BAB7291924A1}"  # the core properties', no custom XML part
W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
DATA = (
    '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n'
    '<inf:informe xmlns:inf="urn:informe"><inf:titulo>Informe anual</inf:titulo>'
    "<inf:anio>2024</inf:anio><inf:fecha>2024-03-15</inf:fecha><inf:notas>"
    "<inf:nota>Primera nota.</inf:nota><inf:nota>Segunda nota.</inf:nota></inf:notas>"
    "</inf:informe>"
)
INFORME = "xmlns:ns0='urn:informe'"


def control(text: str, xpath: str, kind: str = "<w:text/>", store: str = STORE) -> str:
    """A content control showing `text`, bound to `xpath` in the item `store`."""
    binding = (
        f'<w:dataBinding w:prefixMappings="{INFORME}" w:xpath="{xpath}" w:storeItemID="{store}"/>'
    )
    return (
        f"<w:sdt><w:sdtPr>{binding}{kind}</w:sdtPr><w:sdtContent><w:r><w:t xml:space="
        f"'preserve'>{text}</w:t></w:r></w:sdtContent></w:sdt>"
    )


def bound_docx(
    *controls: str, data: bytes = DATA.encode(), properties: bytes | None = None
) -> bytes:
    """A .docx whose paragraphs each hold one of `controls`, with a custom XML part (`data`)
    whose item's id is STORE (in its `properties`, where they are not given), related as
    Word relates it."""
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part

    document = docx.Document()
    package = document.part.package
    item = Part(PackURI("/customXml/item9.xml"), "application/xml", data, package)
    if properties is None:
        properties = (
            f'<ds:datastoreItem ds:itemID="{STORE}" xmlns:ds="http://schemas.openxmlformats.org/'
            'officeDocument/2006/customXml"><ds:schemaRefs/></ds:datastoreItem>'
        ).encode()
    kind = "application/vnd.openxmlformats-officedocument.customXmlProperties+xml"
    item.relate_to(
        Part(PackURI("/customXml/itemProps9.xml"), kind, properties, package), CUSTOM_XML_PROPS
    )
    document.part.relate_to(
        item, "http://schemas.openxmlformats.org/officeDocument/2006/relationships/customXml"
    )
    for held in controls:
        paragraph = document.add_paragraph()
        paragraph._p.append(etree.fromstring(held.replace("<w:sdt>", f"<w:sdt {W}>", 1)))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def translated(data: bytes) -> tuple[docx.document.Document, etree._Element]:
    """The .docx translated (upper-cased), and its custom XML item as saved."""
    read = files.read_file(".docx", data)
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    saved = read.save()
    item = zipfile.ZipFile(io.BytesIO(saved)).read("customXml/item9.xml")
    declared = item.partition(b"?>")[0].replace(b"'", b'"')  # its declaration kept
    assert declared == b'<?xml version="1.0" encoding="UTF-8" standalone="no"'
    return docx.Document(io.BytesIO(saved)), etree.fromstring(item)


def controls(document) -> list[tuple[str, bool]]:
    """Each control's text, and whether it is still bound."""
    body = document.element.body
    return [
        (
            "".join(t.text for t in sdt.iter(qn_w("t"))),
            sdt.find(f".//{qn_w('dataBinding')}") is not None,
        )
        for sdt in body.iter(qn_w("sdt"))
    ]


def test_a_plain_text_control_s_translation_is_written_to_its_bound_node():
    """Word fills a bound control from its node each time it opens the file: the translated
    control showed the Spanish text again. Two controls of one node both show the
    translation, which the node now holds; a control the translation left as it was keeps
    its node as it was."""
    titulo, anio = "/ns0:informe[1]/ns0:titulo[1]", "/ns0:informe[1]/ns0:anio[1]"
    document, item = translated(
        bound_docx(
            control("Informe anual", titulo),
            control("2024", anio),
            control("Informe anual", titulo),
        )
    )
    assert controls(document) == [("INFORME ANUAL", True), ("2024", True), ("INFORME ANUAL", True)]
    space = {"inf": "urn:informe"}
    assert item.xpath("//inf:titulo/text()", namespaces=space) == ["INFORME ANUAL"]
    # what the translation did not change stays, the rest of the data too
    assert item.xpath("//inf:anio/text()", namespaces=space) == ["2024"]
    assert item.xpath("//inf:nota/text()", namespaces=space) == ["Primera nota.", "Segunda nota."]


UNFOLLOWED = [
    "/ns0:informe[1]/ns0:notas[1]/ns0:nota",  # two nodes
    "/ns0:informe[1]/ns0:notas[1]/ns0:nota[last()]",  # a function
    "/ns0:informe[1]/ns0:notas[1]",  # a node holding more than text
    "/ns0:informe[1]/ns0:falta[1]",  # no node
    "/ns1:informe[1]/ns1:titulo[1]",  # a prefix not declared
    "//ns0:titulo",  # anywhere
]


@pytest.mark.parametrize("xpath", UNFOLLOWED)
def test_a_bound_control_whose_node_cannot_be_followed_loses_its_binding(xpath):
    document, item = translated(bound_docx(control("Primera nota.", xpath)))
    assert controls(document) == [("PRIMERA NOTA.", False)]
    assert etree.tostring(item) == etree.tostring(etree.fromstring(DATA.encode()))


def test_a_bound_control_of_no_plain_text_or_no_custom_xml_loses_its_binding():
    """A date's node holds the date, not the words shown; the core properties are no custom
    XML part of the document; two controls of one node that show different translations
    cannot both be its text: each keeps its translation, unbound."""
    fecha, titulo = "/ns0:informe[1]/ns0:fecha[1]", "/ns0:informe[1]/ns0:titulo[1]"
    date = "<w:date w:fullDate='2024-03-15T00:00:00Z'><w:dateFormat w:val='d MMMM yyyy'/></w:date>"
    document, item = translated(
        bound_docx(
            control("15 de marzo de 2024", fecha, date),
            control("Informe anual", "/ns1:coreProperties[1]/ns0:title[1]", store=CORE),
            control("Informe anual", titulo),
            control("Informe", titulo),
        )
    )
    assert controls(document) == [
        ("15 DE MARZO DE 2024", False),
        ("INFORME ANUAL", False),
        ("INFORME ANUAL", False),
        ("INFORME", False),
    ]
    assert etree.tostring(item) == etree.tostring(etree.fromstring(DATA.encode()))


def test_an_xpath_is_followed_by_names_and_positions_only():
    root = etree.fromstring(DATA.encode())
    assert (
        _followed(root, "/ns0:informe[1]/ns0:notas[1]/ns0:nota[2]", INFORME).text == "Segunda nota."
    )
    assert _followed(root, "/ns0:informe/ns0:anio", INFORME).text == "2024"
    assert _followed(root, "/ns0:informe[2]/ns0:anio[1]", INFORME) is None
    assert _followed(root, "/ns0:informe[1]/ns0:anio[1]", "") is None
    assert _followed(root, "ns0:informe[1]", INFORME) is None


def test_bound_controls_are_followed_in_a_time_linear_in_their_number():
    """Each XPath was followed by listing the children of every element on its way: a form
    of 2,000 controls bound to the nodes of one list took 0.7 s to save, 8,000 controls 39
    s, on a thread of the front."""
    read = {}
    for count in (1_000, 4_000):
        notes = "".join(f"<inf:nota>Nota {i}.</inf:nota>" for i in range(count))
        data = f'<inf:informe xmlns:inf="urn:informe">{notes}</inf:informe>'
        bound = [control(f"Nota {i}.", f"/ns0:informe[1]/ns0:nota[{i + 1}]") for i in range(count)]
        read[count] = files.read_file(".docx", bound_docx(*bound, data=data.encode()))
        for batch in read[count].batches(64):
            batch.write([upper_cased(text) for text in batch.texts])
    assert growth(lambda count: read[count].save(), 1_000, 4_000) < 8  # linear: about 4
    document = docx.Document(io.BytesIO(read[4_000].save()))
    assert controls(document)[-1] == ("NOTA 3999.", True)


@pytest.mark.parametrize("broken", ["data", "properties"])
@pytest.mark.parametrize("held", [b"", b"<inf:informe>Informe anual"])
def test_a_control_bound_to_a_custom_xml_part_that_is_no_xml_loses_its_binding(broken, held):
    """A custom XML item or its properties that are empty or no XML (python-docx holds
    them as bytes, and opens the document) stopped the save with lxml's XMLSyntaxError, once
    every paragraph was translated; such a part is no store, kept as it was."""
    titulo = "/ns0:informe[1]/ns0:titulo[1]"
    read = files.read_file(".docx", bound_docx(control("Informe anual", titulo), **{broken: held}))
    for batch in read.batches(64):
        batch.write([upper_cased(text) for text in batch.texts])
    saved = read.save()
    assert controls(docx.Document(io.BytesIO(saved))) == [("INFORME ANUAL", False)]
    name = {"data": "customXml/item9.xml", "properties": "customXml/itemProps9.xml"}[broken]
    assert zipfile.ZipFile(io.BytesIO(saved)).read(name) == held


# a custom XML item as a hand or another tool writes it: a byte order mark, single quotes,
# a comment, white space between elements, a CDATA section
HANDMADE = (
    b"\xef\xbb\xbf<?xml version='1.0' encoding='UTF-8'?>\r\n<!-- informe -->\r\n"
    b"<inf:informe xmlns:inf='urn:informe'>\r\n  <inf:titulo>Informe anual</inf:titulo>\r\n"
    b"  <inf:anio><![CDATA[2024]]></inf:anio>\r\n  <inf:notas><inf:nota>Primera nota.</inf:nota>"
    b"<inf:nota>Segunda nota.</inf:nota></inf:notas>\r\n</inf:informe>"
)


def test_a_custom_xml_part_no_node_of_which_is_written_is_kept_byte_for_byte():
    """A part was written back once a binding looked into it, though no node of it took a
    translation: its byte order mark, quotes and CDATA sections were lost. Where a node is
    written, the part's comments and CDATA sections stay."""
    nota = "/ns0:informe[1]/ns0:notas[1]/ns0:nota"  # two nodes: not followed
    for bound, written in ((nota, False), ("/ns0:informe[1]/ns0:titulo[1]", True)):
        read = files.read_file(".docx", bound_docx(control("Informe anual", bound), data=HANDMADE))
        for batch in read.batches(64):
            batch.write([upper_cased(text) for text in batch.texts])
        saved = zipfile.ZipFile(io.BytesIO(read.save()))
        item = saved.read("customXml/item9.xml")
        if not written:
            assert item == HANDMADE
        else:
            assert etree.fromstring(item).findtext("{urn:informe}titulo") == "INFORME ANUAL"
            assert b"<!-- informe -->" in item and b"<![CDATA[2024]]>" in item
