"""OpenDocument text and presentations (.odt, .odp, odfpy): every paragraph and heading
wherever it sits (a presentation's in its frames' text boxes, a note's in its note), each
one text of its runs of text and spaces inside its spans and links; tabs and line breaks
stay, as do bookmarks, notes, frames and fields."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from service.runtime.files.archive import UNPACKED_BYTES, _opened, _saver
from service.runtime.files.labels import Relabel
from service.runtime.files.model import File, Paragraph, said
from service.runtime.files.runs import _edged


def _odf(data: bytes, suffix: str) -> File:
    """An OpenDocument text or presentation: its paragraphs and headings, wherever they sit
    (a presentation's are in its frames' text boxes, a note's in its note), each one text of
    runs (_odf_runs)."""
    document = _opened(load_odf, data, suffix)
    _odf_spaces_checked(document, suffix)
    paragraphs = []
    for element in _odf_paragraphs(document.topnode):
        runs, parted = _odf_runs(element)
        texts = [run.text for run in runs]
        if said("".join(texts)):
            write = _edged(texts, parted, _odf_writer(element, runs))
            paragraphs.append(Paragraph(texts, write))
    return File(paragraphs, "plain", _saver(document, "write"), relabel=_odf_relabel(document))


def _odf_relabel(document):
    """The `relabel` of an OpenDocument: each language of its styles' text properties
    (fo:language, with its country fo:country: the target's region, or none; and the tag
    style:rfc-language-tag, which LibreOffice writes where those two cannot say a language,
    es-419, and reads before them: the target's tag), and its document properties'
    (meta.xml's dc:language); the Asian and complex scripts' languages
    (style:language-asian, -complex, their tags) are no Spanish text's, and stay."""
    from odf.namespaces import FONS, STYLENS
    from odf.style import TextProperties

    def relabel(wanted: Relabel) -> None:
        _odf_meta_relabelled(document, wanted)
        language, region = wanted.subtags()
        for properties in document.getElementsByType(TextProperties):
            tag = properties.getAttrNS(STYLENS, "rfc-language-tag")
            declared = (properties.getAttrNS(FONS, "language"), tag)
            if all(wanted.value(said or "") is None for said in declared):
                continue
            properties.setAttrNS(FONS, "language", language)
            if region:
                properties.setAttrNS(FONS, "country", region)
            elif properties.getAttrNS(FONS, "country") is not None:
                properties.removeAttrNS(FONS, "country")
            if tag is not None:
                properties.setAttrNS(STYLENS, "rfc-language-tag", wanted.target)

    return relabel


def _odf_meta_relabelled(document, wanted: Relabel) -> None:
    """The document's language in its properties (dc:language, a tag: `es-ES`) the target's
    where it names the source's."""
    from odf.dc import Language
    from odf.element import Text

    for element in document.getElementsByType(Language):
        value = wanted.value("".join(n.data for n in element.childNodes if isinstance(n, Text)))
        if value is not None:
            for node in list(element.childNodes):
                _odf_detach(node)
            element.addText(value)


def _odf_paragraphs(top) -> Iterator:
    """The paragraphs and headings under `top` in the document's order (a heading where it
    sits among the paragraphs, a note's paragraph after the one it sits in), the order a
    paragraph's number in an error follows."""
    from odf.element import Node
    from odf.namespaces import TEXTNS

    stack = [top]
    while stack:
        node = stack.pop()
        if node.qname[0] == TEXTNS and node.qname[1] in ODF_PARAGRAPHS:
            yield node
        stack += reversed([c for c in node.childNodes if c.nodeType == Node.ELEMENT_NODE])


def _odf_spaces_checked(document, suffix: str) -> None:
    """ValueError where a text:s's count (text:c) is not a number, or where the spaces they
    stand for come to more than an archive may unpack (UNPACKED_BYTES): read as " " * c, a
    file of a few kilobytes would be gigabytes of text."""
    from odf import text

    total = 0
    for spaces in document.getElementsByType(text.S):
        count = spaces.getAttribute("c") or "1"
        if not count.isdecimal():
            raise ValueError(f'{suffix}: text:s c="{count}" is not a number of spaces')
        total += int(count)
    if total > UNPACKED_BYTES:
        raise ValueError(f"{suffix}: spaces (text:s) for more than {UNPACKED_BYTES >> 20} MiB")


def load_odf(stream):
    from odf.opendocument import load

    return load(stream)


ODF_PARAGRAPHS = ("p", "h")  # a paragraph, a heading: each one text
ODF_SPACES = ("s",)  # spaces as an element: text of the run they sit in
ODF_BREAKS = {"tab": "\t", "line-break": "\n"}  # each a run of its own, the element kept
ODF_RUNS = ("span", "a")  # formatting, a link: what a run of text sits in


@dataclass
class OdfRun:
    """Text of a paragraph between its other elements: text and spaces (`nodes`, siblings
    in `parent`), or a tab or a line break (`nodes` the one element, which stays)."""

    parent: object
    nodes: list
    text: str
    kept: bool = False  # a tab or a line break: what is written in it goes after it


def _odf_runs(element) -> tuple[list[OdfRun], list[bool]]:
    """A paragraph's runs in order: its text and spaces, those inside its spans and links
    (nested ones too), its tabs and line breaks; what else it holds (a bookmark, a soft
    page break, a note, a frame, a field) parts two runs and stays where it is. With them,
    whether such a thing sits before each run and after the last (_edged)."""
    from odf.element import Text
    from odf.namespaces import TEXTNS

    runs: list[OdfRun] = []
    parted = [False]  # the last one: since the last run

    def walk(parent) -> None:
        last = None  # the run that text here goes on
        for node in parent.childNodes:
            name = node.qname[1] if not isinstance(node, Text) and node.qname[0] == TEXTNS else None
            if isinstance(node, Text) or name in ODF_SPACES:
                if last is None:
                    last = OdfRun(parent, [], "")
                    runs.append(last)
                    parted.append(False)
                last.nodes.append(node)
                last.text += node.data if isinstance(node, Text) else " " * _odf_count(node)
                continue
            last = None
            if name in ODF_BREAKS:
                runs.append(OdfRun(parent, [node], ODF_BREAKS[name], kept=True))
                parted.append(False)
            elif name in ODF_RUNS:
                walk(node)
            else:
                parted[-1] = True

    walk(element)
    return runs, parted


def _odf_count(spaces) -> int:
    return int(spaces.getAttribute("c") or 1)


def _odf_writer(element, runs: list[OdfRun]):
    """Each segment in its run, as text and spaces (a tab or a line break the translation
    holds is a space: the paragraph's own stay where they were, without the white space
    beside them), in place of the run's; where the segments do not keep their runs' order,
    all where the first run of text was, each in a copy of its run's spans and links."""

    def write(placed: list[tuple[int, str]]) -> None:
        placed = [(run, re.sub("[\t\n]", " ", value)) for run, value in placed]
        if not all(a[0] <= b[0] for a, b in itertools.pairwise(placed)):
            _odf_moved(element, runs, placed)
            return
        values = [""] * len(runs)
        for run, value in placed:
            values[run] += value
        for i, (run, value) in enumerate(zip(runs, values, strict=True)):
            if i and runs[i - 1].kept:  # a tab or a break is the white space beside it
                value = value.lstrip()
            if i + 1 < len(runs) and runs[i + 1].kept:
                value = value.rstrip()
            _odf_write_run(run, value)

    return write


def _odf_moved(element, runs: list[OdfRun], placed: list[tuple[int, str]]) -> None:
    """The segments, in their order, where the paragraph's first run of text was, each in a
    copy of the spans and links its run sits in; the runs of text emptied."""
    from odf import teletype

    anchor = next(run for run in runs if not run.kept).nodes[0]
    while anchor.parentNode is not element:
        anchor = anchor.parentNode
    for run, value in placed:
        holder, node = element, runs[run].parent
        chain = []  # the spans and links from the paragraph down to the run
        while node is not element:
            chain.insert(0, node)
            node = node.parentNode
        for original in chain:
            clone = original.__class__(
                qname=original.qname, qattributes=dict(original.attributes), check_grammar=False
            )
            if holder is element:
                element.insertBefore(clone, anchor)
            else:
                holder.appendChild(clone)
            holder = clone
        if holder is element:
            _odf_insert(element, value, anchor)
        else:
            teletype.addTextToElement(holder, value)
    for run in runs:
        if not run.kept:
            _odf_emptied(run)


def _odf_write_run(run: OdfRun, value: str) -> None:
    siblings = run.parent.childNodes
    after = next(i for i, node in enumerate(siblings) if node is run.nodes[-1]) + 1
    before = siblings[after] if after < len(siblings) else None
    if run.kept and not value.strip():
        return
    _odf_insert(run.parent, value, before)
    if not run.kept:
        _odf_emptied(run)


def _odf_insert(parent, value: str, before) -> None:
    """`value` as text and spaces (text:s) into `parent` before its child `before` (None:
    at its end)."""
    from odf import teletype, text

    held = text.Span()  # the value's nodes, moved from here into place
    teletype.addTextToElement(held, value)
    for node in list(held.childNodes):
        parent.insertBefore(node, before)


def _odf_emptied(run: OdfRun) -> None:
    """The run's text and spaces out, and the spans and links left empty by it."""
    for node in run.nodes:
        _odf_detach(node)
    holder = run.parent
    while holder.qname[1] in ODF_RUNS and not holder.childNodes and holder.parentNode:
        parent = holder.parentNode
        _odf_detach(holder)
        holder = parent


def _odf_detach(node) -> None:
    """`node` out of its parent (odfpy's removeChild takes elements only)."""
    parent = node.parentNode
    parent.childNodes[:] = [child for child in parent.childNodes if child is not node]
    for a, b in itertools.pairwise([None, *parent.childNodes, None]):
        if a is not None:
            a.nextSibling = b
        if b is not None:
            b.previousSibling = a
    node.parentNode = node.previousSibling = node.nextSibling = None
