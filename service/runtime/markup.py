"""Texts in HTML or XML: the markup kept exactly, only the text between it translated.

A text in markup is cut into sentences as a plain text is (service.runtime.documents), on a
copy of it in which the markup is blanked: block-level elements of HTML (paragraphs, list
items, headings, cells, line breaks), comments, processing instructions and the contents of
`script` and `style` become line breaks, so a sentence never runs across them; inline tags
and entity references become spaces, so the segmenter reads the words around them; in
HTML the source's own line breaks are spaces too, as a browser shows them (as_rendered). The
sentences' spans index the original text, so everything outside a sentence (block tags,
white space, a tag or entity around a whole sentence) is put back as it was. XHTML's
elements may be named with a prefix (`<html:p>`, `<xhtml:br/>`): a prefixed name is read by
its local name unless the text binds its prefix to a namespace other than XHTML's or SVG's
(html_name). A CDATA section is hidden as a comment is; an XML document whose sections are
text is given them as escaped text first (cdata_as_text).

Inside a sentence, inline tags (`<b>`, `<a href="...">`, `</i>`, `<br/>` ...) and entity
references (`&amp;`, `&eacute;`, `&#160;`) are protected items (service.runtime.protect,
kinds "tag" and "entity"): each becomes a marker, and after decoding each is put back
exactly, attributes untouched. The model places the markers; the tags are put back at those
places in their source order, so the translation nests its tags as the source does, and a
well-formed source gives a well-formed translation.

A text longer than one translation may be is cut into parts (`parts`) after sentence ends
(documents.SENTENCE_CUT) or block edges of the blanked copy, never inside a tag, an entity, a
comment or a script. Each part reopens the inline elements open where it starts and closes
those open where it ends, so it nests its tags on its own; what it adds sits outside every
sentence, comes back as it was, and is taken off its translation again.
"""

from __future__ import annotations

import functools
import html
import re
import string
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from service.runtime.documents import SENTENCE_CUT, Document, split_text

FORMATS = ("plain", "html", "xml")
# elements of HTML that start a new block (a sentence never runs across them), and those
# of an SVG image in a page that hold a label or a description of their own
_BLOCK_NAMES = (
    "address article aside blockquote body br caption dd div dl dt fieldset figcaption "
    "figure footer form h1 h2 h3 h4 h5 h6 head header hr html li main nav ol p pre section "
    "table tbody td tfoot th thead title tr ul "
    "desc text "
)
BLOCK = frozenset(_BLOCK_NAMES.split())
# what holds no text, by how it opens and what it runs to from there (a pattern), in the
# order they are tried: scripts and styles (up to their end tag: _OPENS), comments, CDATA,
# a document type (its internal subset, `[<!ENTITY ...>]`, too), other declarations,
# processing instructions
HIDDEN = (
    ("<!--", r".*?-->"),
    ("<![cdata[", r".*?\]\]>"),
    ("<!doctype", r"[^\[>]*(?:\[.*?\]\s*)?>"),
    ("<!", r"[^>]*>"),
    ("<?", r".*?\?>"),
)
_HIDDEN_REST = {opener: re.compile(rest, re.DOTALL) for opener, rest in HIDDEN}
# where what holds no text opens, on a lowered copy: an element whose content is no text
# (`<script`, `<xhtml:style`, not `<scripts>`: its prefix and name grouped), or HIDDEN
_OPENS = re.compile(
    "|".join(
        [r"<(?:([a-z_][\w.-]*):)?(script|style)(?=[ \t\n\r\f>/]|\Z)"]
        + [re.escape(o) for o, _ in HIDDEN]
    )
)
XHTML = "http://www.w3.org/1999/xhtml"
# the namespaces whose elements a page names as HTML does: XHTML's, and SVG's (an image in
# the page: its `script`, `style` and `text` are read as unprefixed ones are)
PAGE_NAMESPACES = (XHTML, "http://www.w3.org/2000/svg")
# a prefix bound in a tag: `xmlns:svg="http://www.w3.org/2000/svg"`
_BINDING = re.compile(r"""\sxmlns:([\w.-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
# a tag: its name, then its attributes up to the `>` outside their quoted values ("a > b");
# one white space after the name, the rest read with the attributes (`\s+` there tries every
# split of a run of spaces that no `>` ends: time growing with the square of its length)
TAG = r"""</?[A-Za-z][\w:.-]*(?:\s(?>=\s*"[^"]*"|=\s*'[^']*'|[^<>])*)?/?>"""
ENTITY = r"&(?:[A-Za-z][A-Za-z0-9]*|#\d+|#[xX][0-9A-Fa-f]+);"
_TAG = re.compile(TAG)
# ASCII letters lowered alone: str.lower() lengthens some letters (İ), moving every index
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_ENTITY = re.compile(ENTITY)


def hidden(text: str) -> list[tuple[int, int]]:
    """The spans of `text` that hold no text to translate (script and style elements, and
    HIDDEN), in order, found in one pass from the start: what one opens is closed by its
    closer only (a `<script>` inside a comment opens nothing), and one never closed runs to
    the end of the text, as a browser reads it."""
    lower, spans, at = text.translate(_ASCII_LOWER), [], 0  # as long as `text`
    foreign = foreign_prefixes(text)
    while (opens := _OPENS.search(lower, at)) is not None:
        at = opens.start() + 1
        if opens.group(2) is None:
            rest = _HIDDEN_REST[opens.group()]
        elif opens.group(1) not in foreign:  # a script or a style of HTML's
            rest = _up_to_end_tag(opens.group()[1:])
        else:
            continue
        closed = rest.match(lower, opens.end())
        at = closed.end() if closed else len(text)
        spans.append((opens.start(), at))
    return spans


@functools.cache
def _up_to_end_tag(name: str) -> re.Pattern:
    """What runs to the `>` of the end tag of an element named `name` (lowered)."""
    return re.compile(f".*?</{re.escape(name)}[^>]*>?", re.DOTALL)


def foreign_prefixes(text: str) -> frozenset[str]:
    """The prefixes (lowered) that `text`'s tags bind to a namespace other than those of
    PAGE_NAMESPACES (`xmlns:o="urn:schemas-microsoft-com:office:office"`): an element named
    with one is not HTML's, whatever its local name."""
    if "xmlns:" not in text:
        return frozenset()
    bound = {}
    for tag in _TAG.finditer(text):
        for binding in _BINDING.finditer(tag.group()):
            namespace = binding.group(2) if binding.group(2) is not None else binding.group(3)
            prefix = binding.group(1).translate(_ASCII_LOWER)
            bound[prefix] = bound.get(prefix, False) or namespace.strip() in PAGE_NAMESPACES
    return frozenset(prefix for prefix, page in bound.items() if not page)


def html_name(tag: str, foreign: frozenset[str] = frozenset()) -> str:
    """The name of a tag's element as HTML reads it, lowered: a prefixed name (`html:p`,
    `xhtml:br`, `svg:text`) by its local name, unless its prefix is `foreign`
    (foreign_prefixes). A
    prefix the text does not bind is read as XHTML's: a piece of a document comes without
    the root element that binds it, and in HTML a prefix binds nothing, so `<h:p>` written
    there means a paragraph."""
    name = tag_name(tag)
    prefix, colon, local = name.partition(":")
    return local if colon and local and prefix not in foreign else name


def unprefixed(tag: str, foreign: frozenset[str] = frozenset()) -> str:
    """`tag` with its element named by its HTML name (html_name) as written: `</html:p >`
    -> `</p >`."""
    if html_name(tag, foreign) == tag_name(tag):
        return tag
    name = re.match(r"</?([\w:.-]+)", tag)
    return tag[: name.start(1)] + name.group(1).partition(":")[2] + tag[name.end(1) :]


def shown_tags(text: str) -> Iterator[re.Match]:
    """The tags of `text` outside its hidden spans (a comment's or a script's text holds
    none), in order: matches of TAG on `text`."""
    spans, h = hidden(text), 0
    for match in _TAG.finditer(text):
        while h < len(spans) and spans[h][1] <= match.start():
            h += 1
        if h == len(spans) or match.start() < spans[h][0]:
            yield match


def without_hidden(text: str) -> str:
    """`text` without its HIDDEN spans."""
    kept, at = [], 0
    for start, end in hidden(text):
        kept.append(text[at:start])
        at = end
    return "".join(kept) + text[at:]


CDATA = ("<![CDATA[", "]]>")  # how a CDATA section opens and closes: in XML, in capitals


def cdata_as_text(text: str) -> str:
    """An XML text (XHTML, an EPUB's table of contents) with each CDATA section outside its
    comments, scripts and styles written as the text it holds, escaped (`&`, `<`, `>`): in
    XML it is text, which a parser reads the same either way, and so written it is
    translated as the text around it is. Where what it holds stayed CDATA, the markup code
    would read a `<b>` in it as a tag and escape the translation's `&` into it, shown as
    "&amp;". A section never closed, and HTML's (a bogus comment), are left to `hidden`."""
    kept, at = [], 0
    opener, closer = CDATA
    for start, end in hidden(text):
        section = text[start:end]
        if section.startswith(opener) and section.endswith(closer):
            held = section[len(opener) : -len(closer)]
            kept += [text[at:start], html.escape(held, quote=False)]
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
    foreign = foreign_prefixes(text)
    for match in _TAG.finditer(text):
        if chars[match.start()] == "\n":  # inside a comment or a script
            continue
        block = text_format == "html" and html_name(match.group(), foreign) in BLOCK
        fill(match.start(), match.end(), "\n" if block else " ")
    for match in _ENTITY.finditer(text):
        if chars[match.start()] != "\n":
            fill(match.start(), match.end(), " ")
    return "".join(chars)


def split_markup(text: str, splitting: str, text_format: str) -> Document:
    """The sentences of a text in `text_format` (a plain text is split as it is). In markup
    "none" cuts at what a sentence never runs across (blocks, comments, scripts) alone: the
    text's own line breaks are spaces to it. In HTML "sentences" reads the text as a
    browser shows it (as_rendered): a line break of its source is a space, but in `<pre>`."""
    if text_format == "plain":
        return split_text(text, splitting)
    if splitting == "none":
        flat = blanked(text.translate(_LINE_BREAKS), text_format)
        return Document(text, split_text(flat, "lines").sentences)
    shown = as_rendered(text) if splitting == "sentences" and text_format == "html" else text
    return Document(text, split_text(blanked(shown, text_format), splitting).sentences)


_LINE_BREAKS = str.maketrans("\r\n", "  ")  # as long: every offset holds
# HTML elements whose line breaks are shown as line breaks
PREFORMATTED = frozenset({"pre", "textarea", "listing"})


def as_rendered(text: str) -> str:
    """An HTML text with the line breaks of its source that a browser shows as spaces
    (all but those inside PREFORMATTED elements) made spaces, character for character: a
    source wrapped at 80 columns holds its sentences across its lines."""
    if "\n" not in text and "\r" not in text:
        return text
    foreign, pieces, at, depth = foreign_prefixes(text), [], 0, 0
    for match in shown_tags(text):
        tag = match.group()
        if tag.endswith("/>") or html_name(tag, foreign) not in PREFORMATTED:
            continue
        if not tag.startswith("</"):
            if depth == 0:  # what runs to here is shown wrapped
                pieces.append(text[at : match.end()].translate(_LINE_BREAKS))
                at = match.end()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:  # the element's content, as it is
                pieces.append(text[at : match.start()])
                at = match.start()
    rest = text[at:]
    return "".join(pieces) + (rest if depth else rest.translate(_LINE_BREAKS))


def well_formed(text: str) -> bool:
    """Whether the text's tags nest (every end tag closes the innermost open element;
    void elements, self-closed tags and HTML's void elements open nothing)."""
    stack: list[str] = []
    foreign = foreign_prefixes(text)
    for match in _TAG.finditer(without_hidden(text)):
        tag = match.group()
        name = tag_name(tag)
        if tag.endswith("/>") or html_name(tag, foreign) in VOID:
            continue
        if tag.startswith("</"):
            if not stack or stack.pop() != name:
                return False
        else:
            stack.append(name)
    return not stack


_VOID_NAMES = "area base br col embed hr img input link meta source track wbr "
VOID = frozenset(_VOID_NAMES.split())


# where a blanked text may be cut: after a sentence's end or at a block's edge (its white
# space read from its start only: once, where it holds no line break)
_GAP = re.compile(rf"{SENTENCE_CUT.pattern}|(?<!\s)\s*\n\s*")


@dataclass(frozen=True)
class Part:
    """A part of a text as it is translated: `source`, a slice of the text, after `opened`
    (the start tags of the inline elements open where it starts) and before `closed` (the
    end tags of those open where it ends)."""

    source: str
    opened: str = ""
    closed: str = ""

    @property
    def text(self) -> str:
        return self.opened + self.source + self.closed

    def unwrapped(self, translation: str) -> tuple[int, int]:
        """(start, end) of `source`'s translation in the translation of `text`: without
        `opened` and `closed` where it keeps them at its ends, as markup outside every
        sentence is kept; else all of it."""
        start, end = len(self.opened), len(translation) - len(self.closed)
        kept = translation.startswith(self.opened) and translation.endswith(self.closed)
        return (start, end) if kept and end >= start else (0, len(translation))


def within(offset: int, start: int, length: int) -> int:
    """An offset in a part's text (or its translation) as one in what lies from `start` for
    `length` characters (its source, without the tags the part added)."""
    return min(max(offset - start, 0), length)


def parts(text: str, most: int, text_format: str = "html") -> list[Part]:
    """A text in HTML (or XML) in parts of at most `most` characters each (their `text`),
    their sources joined the text: each cut after a sentence's end or at a block's edge,
    outside every tag, entity, comment and script, where the fewest inline elements are
    open. ValueError where a sentence is longer than `most`, or the tags its part repeats
    around it make the part longer (_too_long)."""
    if len(text) <= most:
        return [Part(text)]
    found, start, opened = [], 0, None
    cuts, k = _cuts(text, text_format), 0
    while _length(opened) + len(text) - start > most:
        best, first = None, k
        while k < len(cuts) and cuts[k][0] - start <= most:
            at, there = cuts[k]
            if at > start and _length(opened) + at - start + _closing(there) <= most:
                best = k
            k += 1
        if best is None:
            raise ValueError(_too_long(text, start, opened, cuts[first:], most))
        at, there = cuts[best]
        start_tags = opened.start_tags() if opened else ""
        found.append(Part(text[start:at], start_tags, there.closers() if there else ""))
        start, opened, k = at, there, best + 1
    return [*found, Part(text[start:], opened.start_tags() if opened else "")]


def _length(opened: _Open | None) -> int:
    """Characters of the start tags of what is `opened` (a part reopens them)."""
    return opened.opening if opened else 0


def _closing(there: _Open | None) -> int:
    """Characters of the end tags of what is open `there` (a part closes them)."""
    return there.closing if there else 0


def _too_long(text: str, start: int, opened: _Open | None, cuts: list, most: int) -> str:
    """Why no part of at most `most` characters starts at `start`, `opened` open there
    (`cuts`: those from there on): the sentence up to the next cut is longer (its words
    and the tags among them), or the tags around it are: those of the text, and the start
    and end tags its part repeats of the inline elements open across its ends."""
    end, there = next(((at, open_) for at, open_ in cuts if at > start), (len(text), None))
    words = blanked(text[start:end], "xml")
    first, last = len(words) - len(words.lstrip()), len(words.rstrip())
    if last - first > most:
        return f"a sentence longer than {most} characters"
    repeated = _length(opened) + _closing(there)
    quoted = " ".join(words.split())
    quoted = quoted if len(quoted) <= 40 else quoted[:40].rstrip() + "..."
    said = (
        f'the sentence "{quoted}" ({last - first} characters) and the tags around it make a '
        f"part of {repeated + end - start} characters, longer than {most}"
    )
    if not repeated:
        return said
    names = dict.fromkeys(o.name for chain in (opened, there) if chain for o in chain._outward())
    shown = ", ".join(f"<{name}>" for name in list(names)[:3]) + (", ..." if len(names) > 3 else "")
    return f"{said} ({repeated} of them repeat the tags of {shown}, open across the part's ends)"


@dataclass(frozen=True, slots=True)
class _Open:
    """The inline elements open at a place: the innermost (its name and start tag) inside
    those of `outer` (None: none). Every place inside the element shares it: a place holds
    what is open there at no cost, however deep."""

    name: str
    tag: str
    outer: _Open | None
    count: int  # elements open, this one and those outside it
    opening: int  # characters of their start tags
    closing: int  # characters of their end tags

    def _outward(self):
        """This element, then each one outside it."""
        open_: _Open | None = self
        while open_ is not None:
            yield open_
            open_ = open_.outer

    def start_tags(self) -> str:
        """Their start tags, the outermost first."""
        return "".join(reversed([open_.tag for open_ in self._outward()]))

    def closers(self) -> str:
        """Their end tags, the innermost first."""
        return "".join(f"</{open_.name}>" for open_ in self._outward())


def _cuts(text: str, text_format: str) -> list[tuple[int, _Open | None]]:
    """Where `text` (in `text_format`) may be cut, in order, with the inline elements open
    there: in each gap (_GAP) between the text's first and last words, the places outside
    markup where the fewest are open."""
    blank = blanked(as_rendered(text) if text_format == "html" else text, text_format)
    foreign = foreign_prefixes(text)
    void = VOID if text_format == "html" else frozenset()  # XML closes its own
    first, last = len(blank) - len(blank.lstrip()), len(blank.rstrip())
    inside = bytearray(len(text) + 1)  # 1: a place inside a tag, an entity, a comment...
    marked = [*hidden(text), *((m.start(), m.end()) for m in re.finditer(f"{TAG}|{ENTITY}", text))]
    for begin, end in marked:
        inside[begin + 1 : end] = b"\x01" * (end - begin - 1)
    elements = [m for m in _TAG.finditer(text) if blank[m.start()] != "\n"]  # inline ones
    cuts, there, names, e = [], None, Counter(), 0
    for gap in _GAP.finditer(blank):
        places = []
        for at in range(gap.start() + len(gap.group().rstrip()), gap.end() + 1):
            while e < len(elements) and elements[e].end() <= at:
                tag = elements[e].group()
                there = _opened(there, names, tag, html_name(tag, foreign) in void)
                e += 1
            if first < at < last and not inside[at]:
                places.append((there.count if there else 0, at, there))
        fewest = min((open_count for open_count, _, _ in places), default=0)
        cuts += [(at, open_) for open_count, at, open_ in places if open_count == fewest]
    return cuts


def _opened(there: _Open | None, names: Counter, tag: str, void: bool) -> _Open | None:
    """What is open after an inline `tag`, `there` open before it and `names` counting their
    names (kept up to date): an end tag closes its element and those open inside it; one
    that closes nothing open, a `void` element's or a self-closed tag, changes nothing."""
    name = tag_name(tag)
    if tag.startswith("</"):
        closed = None
        while names[name] and (closed is None or closed.name != name):
            closed, there = there, there.outer
            names[closed.name] -= 1
        return there
    if tag.endswith("/>") or void:
        return there
    names[name] += 1
    count, opening, closing = (there.count, there.opening, there.closing) if there else (0, 0, 0)
    return _Open(name, tag, there, count + 1, opening + len(tag), closing + len(name) + 3)
