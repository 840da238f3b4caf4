"""Texts in HTML or XML: the markup kept exactly, only the text between it translated.

A text in markup is cut into sentences as a plain text is (service.runtime.documents), on a
copy of it in which the markup is blanked: block-level elements of HTML (paragraphs, list
items, headings, cells, line breaks), comments, processing instructions and the contents of
`script` and `style` become line breaks, so a sentence never runs across them; inline tags
and entity references become spaces, so the segmenter reads the words around them. The
sentences' spans index the original text, so everything outside a sentence (block tags,
white space, a tag or entity around a whole sentence) is put back as it was.

Inside a sentence, inline tags (`<b>`, `<a href="...">`, `</i>`, `<br/>` ...) and entity
references (`&amp;`, `&eacute;`, `&#160;`) are protected items (service.runtime.protect,
kinds "tag" and "entity"): each becomes a marker, and after decoding each is put back
exactly, attributes untouched. The model places the markers; the tags are put back at those
places in their source order, so the translation nests its tags as the source does, and a
well-formed source gives a well-formed translation.
"""

from __future__ import annotations

import re
import string

from service.runtime.documents import Document, split_text

FORMATS = ("plain", "html", "xml")
# HTML elements that start a new block (a sentence never runs across them)
_BLOCK_NAMES = (
    "address article aside blockquote body br caption dd div dl dt fieldset figcaption "
    "figure footer form h1 h2 h3 h4 h5 h6 head header hr html li main nav ol p pre section "
    "table tbody td tfoot th thead title tr ul "
)
BLOCK = frozenset(_BLOCK_NAMES.split())
# what holds no text, by how it opens and closes, in the order they are tried: scripts and
# styles (up to their end tag), comments, CDATA, declarations, processing instructions
HIDDEN = (
    ("<script", "</script"),
    ("<style", "</style"),
    ("<!--", "-->"),
    ("<![cdata[", "]]>"),
    ("<!", ">"),
    ("<?", "?>"),
)
TAG = r"</?[A-Za-z][\w:.-]*(?:\s+[^<>]*?)?/?>"
ENTITY = r"&(?:[A-Za-z][A-Za-z0-9]*|#\d+|#[xX][0-9A-Fa-f]+);"
_TAG = re.compile(TAG)
_TAG_ENDS = ("", " ", "\t", "\n", "\r", "\f", ">", "/")  # what may follow a tag's name
# ASCII letters lowered alone: str.lower() lengthens some letters (İ), moving every index
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_ENTITY = re.compile(ENTITY)


def hidden(text: str) -> list[tuple[int, int]]:
    """The spans of `text` that hold no text to translate (HIDDEN), in order, found in one
    pass from the start: what one opens is closed by its closer only (a `<script>` inside a
    comment opens nothing), and one never closed runs to the end of the text, as a
    browser reads it."""
    lower, spans, at = text.translate(_ASCII_LOWER), [], 0  # as long as `text`
    while (start := lower.find("<", at)) >= 0:
        at = start + 1
        for opener, closer in HIDDEN:
            if not lower.startswith(opener, start):
                continue
            after = start + len(opener)
            if opener in ("<script", "<style") and lower[after : after + 1] not in _TAG_ENDS:
                continue  # another element's name (`<scripts>`)
            end = lower.find(closer, after)
            if end < 0:
                end = len(text)
            elif closer.startswith("</"):  # up to the end tag's `>`
                close = lower.find(">", end)
                end = len(text) if close < 0 else close + 1
            else:
                end += len(closer)
            spans.append((start, end))
            at = end
            break
    return spans


def without_hidden(text: str) -> str:
    """`text` without its HIDDEN spans."""
    kept, at = [], 0
    for start, end in hidden(text):
        kept.append(text[at:start])
        at = end
    return "".join(kept) + text[at:]


def tag_name(tag: str) -> str:
    return re.match(r"</?([\w:.-]+)", tag).group(1).lower()


def blanked(text: str, text_format: str) -> str:
    """The text with its markup blanked for segmentation, character for character."""
    chars = list(text)

    def fill(start: int, end: int, by: str) -> None:
        chars[start:end] = by * (end - start)

    for start, end in hidden(text):
        fill(start, end, "\n")
    for match in _TAG.finditer(text):
        if chars[match.start()] == "\n":  # inside a comment or a script
            continue
        block = text_format == "html" and tag_name(match.group()) in BLOCK
        fill(match.start(), match.end(), "\n" if block else " ")
    for match in _ENTITY.finditer(text):
        if chars[match.start()] != "\n":
            fill(match.start(), match.end(), " ")
    return "".join(chars)


def split_markup(text: str, splitting: str, text_format: str) -> Document:
    """The sentences of a text in `text_format` (a plain text is split as it is)."""
    if text_format == "plain":
        return split_text(text, splitting)
    if splitting == "none":
        return split_text(text, "none")
    return Document(text, split_text(blanked(text, text_format), splitting).sentences)


def well_formed(text: str) -> bool:
    """Whether the text's tags nest (every end tag closes the innermost open element;
    void elements, self-closed tags and HTML's void elements open nothing)."""
    stack: list[str] = []
    for match in _TAG.finditer(without_hidden(text)):
        tag = match.group()
        name = tag_name(tag)
        if tag.endswith("/>") or name in VOID:
            continue
        if tag.startswith("</"):
            if not stack or stack.pop() != name:
                return False
        else:
            stack.append(name)
    return not stack


_VOID_NAMES = "area base br col embed hr img input link meta source track wbr "
VOID = frozenset(_VOID_NAMES.split())
