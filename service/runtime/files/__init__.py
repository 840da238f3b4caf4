"""Files translated whole, as LibreTranslate's `translate_file` (service.front.http) and
`attnserve translate --input` take them: .txt, .html, .srt (subtitles), .epub (its XHTML read
as HTML, its table of contents' labels too), .docx (python-docx), .pptx (python-pptx), .odt
and .odp (odfpy), .pdf (pdfminer.six, pypdf, reportlab; the libraries are in the serve
extra). A document is read into paragraphs, each a list of runs (spans of one character
formatting); each paragraph is translated as one text, and its translation is cut back into
runs by the alignment: every target word goes to the run of the source word it attends to
most, so a bold word stays bold where its translation lands. Paragraph styles, tables,
lists, headers, footers, slides' layouts, subtitles' timings and a PDF's pages stay as they
are; where the file declares the source language, it declares the target's (`File.declare`).

Here: `read_file`, the dispatch by suffix. The modules:
- `model`: what every format is read into (`File`, `Paragraph`) and sent as (`Batch`,
  `joined` for a paragraph sent in parts);
- `alignment`: a translation cut back into its source's runs (`segments`);
- `archive`: a zipped format's checks before its library opens it;
- `labels`: the language a translated file declares;
- `runs`: run writers the office formats share;
- `drawingml`: DrawingML text (a slide's, a chart's title, SmartArt's), read and written;
- `diagrams`: SmartArt diagrams' data and drawing parts, in a .docx or a .pptx;
- `bindings`: a .docx's content controls bound to custom XML, and their data;
- `pdfparagraphs`: a PDF page's text boxes read as paragraphs, of lines measured by
  `pdflines`, those boxed apart from the paragraph they continue joined to it
  (`pdfcontinued`);
- `pdftext`, `pdfdraw`: a PDF's text read with the operators that show it and taken out of
  its content streams; a translated text box drawn;
- `pdfalone`: a PDF paragraph of one line told centred or flush right by its table's cell,
  its column or its page;
- a module per format: `texts` (.txt, .html, .epub), `subtitles` (.srt), `word` (.docx),
  `slides` (.pptx), `opendocument` (.odt, .odp), `pdf` (.pdf).
"""

from __future__ import annotations

import re

from service.runtime import markup
from service.runtime.files.archive import _not_a
from service.runtime.files.model import (
    HTML_PIECE,
    Batch,
    File,
    Paragraph,
    _written_as,
    joined,
)
from service.runtime.files.opendocument import _odf
from service.runtime.files.pdf import _pdf
from service.runtime.files.slides import _pptx
from service.runtime.files.subtitles import _srt
from service.runtime.files.texts import _epub, _html, _text, decoded_text
from service.runtime.files.word import _docx

# what the callers use: the model, the formats, the reader, a text file's encoding
__all__ = [
    "FORMATS",
    "HTML_PIECE",
    "Batch",
    "File",
    "Paragraph",
    "decoded_text",
    "joined",
    "read_file",
]

FORMATS = (".txt", ".html", ".htm", ".srt", ".epub", ".docx", ".pptx", ".odt", ".odp", ".pdf")
# what XML 1.0 cannot hold: a model's byte pieces can give it
XML_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
XML_FORMATS = (".epub", ".docx", ".pptx", ".odt", ".odp")


def read_file(suffix: str, data: bytes, piece: int = HTML_PIECE) -> File:
    """The paragraphs of a file (HTML in pieces of at most `piece` characters where its
    blocks allow), each longer paragraph in parts (File.parts); ValueError when it cannot be
    read as its suffix says, or a paragraph holds a sentence longer than `piece` (with the
    tags around it, in HTML: markup.parts)."""
    read = _read(suffix, data, piece)
    read.most, cut = piece, []
    for number, paragraph in enumerate(read.paragraphs, 1):
        try:
            cut.append(read.parts(paragraph))
        except ValueError as error:
            shown = paragraph.text  # HTML as its words, its markup left out
            if read.text_format == "html":
                shown = " ".join(markup.blanked(shown, "html").split())
            start = shown.lstrip()[:40].rstrip()
            raise ValueError(f'paragraph {number} ("{start}..."): {error}') from None
    read.cut = cut
    return read


def _read(suffix: str, data: bytes, piece: int) -> File:
    read = _read_as(suffix, data, piece)
    if suffix in XML_FORMATS:  # python-docx refuses such a character, XHTML is no XML with it
        for paragraph in read.paragraphs:
            paragraph.write = _written_as(paragraph.write, lambda t: XML_UNSAFE.sub("", t))
    return read


def _read_as(suffix: str, data: bytes, piece: int) -> File:
    if suffix in (".txt", ".html", ".htm", ".srt"):  # text, written back in its encoding
        bom, encoding, content = decoded_text(data)
        readers = {".txt": _text, ".srt": lambda text, _: _srt(text)}
        read = readers.get(suffix, _html)(content, piece)
        save = read.save
        if encoding != "utf-8":
            save = lambda written=save: written().decode("utf-8").encode(encoding)  # noqa: E731
        if bom:
            read.save = lambda: bom + save()
        return read
    if suffix == ".epub":
        return _epub(data, piece)
    readers = {".docx": _docx, ".pptx": _pptx, ".odt": _odf, ".odp": _odf, ".pdf": _pdf}
    if suffix not in readers:
        raise ValueError(f"{suffix}: not one of {FORMATS}")
    try:
        return readers[suffix](data, suffix)
    except ValueError:
        raise
    except Exception as error:  # the library's, on a part it opened but could not read
        raise ValueError(_not_a(suffix, error)) from None
