"""Text files: a .txt file's blocks between blank lines, an HTML file in pieces cut after its
blocks' ends, an .epub's XHTML documents each read as HTML and its EPUB 2 table of contents'
labels (XML both: their CDATA sections read as text); a text file's encoding told by its byte
order mark."""

from __future__ import annotations

import codecs
import io
import posixpath
import re
import zipfile
from collections.abc import Iterator
from urllib.parse import unquote
from xml.etree import ElementTree

from service.runtime import documents, markup
from service.runtime.files import labels
from service.runtime.files.archive import _archive, _not_a
from service.runtime.files.labels import Relabel
from service.runtime.files.model import HTML_PIECE, File, Paragraph, said

# the end of a block of HTML: a piece of a file ends there (a sentence never crosses it)
BLOCK_END = re.compile(
    r"</(?:p|div|h[1-6]|li|dd|dt|tr|table|ul|ol|dl|section|article|aside|nav|header|footer|"
    r"blockquote|pre|figure)\s*>",
    re.IGNORECASE,
)
# a text file's byte order mark -> its encoding (none: UTF-8); kept out of the text
TEXT_BOMS = {
    codecs.BOM_UTF8: "utf-8",
    codecs.BOM_UTF16_LE: "utf-16-le",
    codecs.BOM_UTF16_BE: "utf-16-be",
}
# a line break's tag (attributes, "/>" too): where a block too long is cut
LINE_BREAK = re.compile(r"<br(?:[\s/].*)?>", re.IGNORECASE | re.DOTALL)


def decoded_text(data: bytes) -> tuple[bytes, str, str]:
    """A text file's bytes -> its byte order mark (or none), its encoding (TEXT_BOMS: UTF-8
    where there is none) and its text without the mark; UnicodeDecodeError where it is not
    of that encoding."""
    bom = next((b for b in TEXT_BOMS if data.startswith(b)), b"")
    encoding = TEXT_BOMS.get(bom, "utf-8")
    return bom, encoding, data[len(bom) :].decode(encoding)


def _text(content: str, piece: int = HTML_PIECE) -> File:
    """A text file's paragraphs: its blocks between blank lines, a block longer than `piece`
    characters in pieces (`documents.pieces`: a file of any length, of line breaks alone
    too)."""
    blocks = re.split(r"(\n[ \t]*\n\s*)", content)  # blocks, and the blank lines after each
    parts: list[str] = []
    paragraphs = []
    for i, block in enumerate(blocks):
        for part in documents.pieces(block, piece) if i % 2 == 0 else [block]:
            parts.append(part)
            if i % 2 == 0 and said(part):
                paragraphs.append(Paragraph([part], _piece_writer(parts, len(parts) - 1)))
    return File(paragraphs, "plain", lambda: "".join(parts).encode())


def _html(content: str, piece: int = HTML_PIECE) -> File:
    """An HTML file in pieces of about `piece` characters, each cut after a block's end (a
    text is translated whole up to a limit); a piece with no text is kept as it is."""
    pieces = html_pieces(content, piece)
    paragraphs = []
    for i, piece in enumerate(pieces):
        if _shows_text(piece):
            paragraphs.append(Paragraph([piece], _piece_writer(pieces, i)))
    return _markup_file(paragraphs, pieces)


def _shows_text(piece: str) -> bool:
    """Whether HTML `piece` holds text to translate outside its tags."""
    return said(re.sub(r"<[^<>]*>", "", piece))  # from each "<" to the next "<" at most


def _markup_file(paragraphs: list[Paragraph], pieces: list[str]) -> File:
    """A File of HTML or XML `pieces` (the paragraphs' among them), saved joined, their
    `lang` and `xml:lang` declaring the target language where they declared the source's."""
    relabels: list[Relabel] = []
    save = lambda: labels.in_markup("".join(pieces), relabels).encode()  # noqa: E731
    return File(paragraphs, "html", save, relabel=relabels.append)


def html_pieces(content: str, most: int = HTML_PIECE) -> list[str]:
    """`content` cut after block ends into pieces of at most `most` characters where it can
    be, a block longer than that after its line breaks (`<br>`) where it has them (else it
    is a piece of its own, translated in parts: File.parts); never inside a script, a style
    or a comment."""
    return [
        part
        for piece in _cut_after(content, BLOCK_END, most)
        for part in (_cut_after(piece, LINE_BREAK, most) if len(piece) > most else [piece])
    ]


def html_parts(content: str, most: int = HTML_PIECE) -> list[markup.Part]:
    """`content` in parts of at most `most` characters (their `text`), their sources joined
    the content: its pieces (html_pieces), a longer one cut after its sentences
    (markup.parts; ValueError where a sentence is longer)."""
    return [part for piece in html_pieces(content, most) for part in markup.parts(piece, most)]


def _cut_after(content: str, pattern: re.Pattern, most: int) -> list[str]:
    """`content` cut after its tags that `pattern` matches whole, read by their HTML names
    (markup.unprefixed: `</xhtml:p>` as `</p>`), outside what holds no text (never one
    inside another tag's quoted value), into pieces of at most `most` characters where
    those tags allow."""
    pieces, start, last = [], 0, 0
    foreign = markup.foreign_prefixes(content)
    for match in markup.shown_tags(content):  # a script's or a comment's text ends no block
        if not pattern.fullmatch(markup.unprefixed(match.group(), foreign)):
            continue
        if match.end() - start > most and last > start:
            pieces.append(content[start:last])
            start = last
        last = match.end()
    if len(content) - start > most and last > start:
        pieces.append(content[start:last])
        start = last
    return [*pieces, content[start:]] if start < len(content) or not pieces else pieces


def _piece_writer(pieces: list[str], i: int):
    def write(placed: list[tuple[int, str]]) -> None:
        pieces[i] = "".join(value for _, value in placed)

    return write


# the media types of what an EPUB's manifest lists that is translated: its content documents
# (XHTML), and an EPUB 2 book's table of contents (NCX)
XHTML_TYPE, NCX_TYPE = "application/xhtml+xml", "application/x-dtbncx+xml"


def _epub(data: bytes, piece: int) -> File:
    """An EPUB's content documents (the XHTML its package lists), each read as HTML, and
    its EPUB 2 table of contents (_ncx), where the archive holds it, each with its CDATA
    sections written as escaped text (markup.cdata_as_text); every other file of the
    archive kept as it is, in its order and compression, its package (OPF) declaring the
    target language where it declared the source's (its `dc:language`)."""
    archive = _archive(data, ".epub")
    entries = archive.infolist()
    held = set(archive.namelist())
    try:
        package, listed = _package(archive)
        documents: dict[str, File] = {}
        for name, kind in listed.items():
            if kind == NCX_TYPE and name not in held:
                continue  # a book reads without its table of contents
            text = markup.cdata_as_text(archive.read(name).decode("utf-8"))  # both XML
            documents[name] = _html(text, piece) if kind == XHTML_TYPE else _ncx(text)
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError, ValueError) as error:
        raise ValueError(_not_a(".epub", error)) from None
    paragraphs = [p for document in documents.values() for p in document.paragraphs]
    relabels: list[Relabel] = []

    def relabel(wanted: Relabel) -> None:
        relabels.append(wanted)
        for document in documents.values():
            document.relabel(wanted)

    def saved(name: str) -> bytes:
        if name in documents:
            return documents[name].save()
        body = archive.read(name)
        if name != package or not relabels:
            return body
        text = body.decode("utf-8", "surrogateescape")  # any bytes back as they were
        return labels.in_package(text, relabels).encode("utf-8", "surrogateescape")

    def save() -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as written:
            for entry in entries:  # the entry's compression: mimetype stored
                written.writestr(entry, saved(entry.filename))
        return out.getvalue()

    return File(paragraphs, "html", save, relabel=relabel)


def _package(archive: zipfile.ZipFile) -> tuple[str, dict[str, str]]:
    """The archive's name of its package (OPF), and the names of the files its
    manifest lists that are translated -> their media type (XHTML_TYPE, NCX_TYPE)."""
    container = ElementTree.fromstring(archive.read("META-INF/container.xml"))
    rootfile = next((e for e in container.iter() if e.tag.endswith("rootfile")), None)
    if rootfile is None or not rootfile.get("full-path"):
        raise ValueError("META-INF/container.xml names no package")
    package = rootfile.get("full-path")
    manifest = ElementTree.fromstring(archive.read(package))
    folder = posixpath.dirname(package)
    return package, {
        posixpath.normpath(posixpath.join(folder, unquote(item.get("href", "")))): kind
        for item in manifest.iter()
        if item.tag.endswith("item") and (kind := item.get("media-type")) in (XHTML_TYPE, NCX_TYPE)
    }


# the elements of an NCX whose `text` a reader shows: an entry's label, the book's title
NCX_LABELS = ("navlabel", "doctitle")


def _ncx(content: str) -> File:
    """An EPUB 2 table of contents (NCX): the text of each entry's label and of the book's
    title, each a paragraph of HTML (an entity in it kept); the rest (an entry's target, its
    order, an author) as it is."""
    pieces, paragraphs, at = [], [], 0
    for start, end in _ncx_labels(content):
        pieces += [content[at:start], content[start:end]]
        at = end
        if _shows_text(pieces[-1]):
            paragraphs.append(Paragraph([pieces[-1]], _piece_writer(pieces, len(pieces) - 1)))
    pieces.append(content[at:])
    return _markup_file(paragraphs, pieces)


def _ncx_labels(content: str) -> Iterator[tuple[int, int]]:
    """The spans of what each `text` element of an NCX_LABELS element holds, in order."""
    opened: list[str] = []  # the names of the elements open, outermost first
    start = None
    for match in markup.shown_tags(content):
        tag, name = match.group(), markup.tag_name(match.group()).rpartition(":")[2]
        if tag.startswith("</"):
            if name == "text" and start is not None:
                yield start, match.start()
                start = None
            if name in opened:  # it ends its element and any left open inside it
                while opened.pop() != name:
                    pass
        elif not tag.endswith("/>"):
            if name == "text" and opened and opened[-1] in NCX_LABELS:
                start = match.end()
            opened.append(name)
