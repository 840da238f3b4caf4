"""DrawingML text (a:p), as a slide's shapes, a chart's titles and a SmartArt diagram hold
it: a paragraph's texts, each of its runs and line breaks parted by the fields that stay,
with their writers, and the languages its text properties name."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

from service.runtime.files.labels import Relabel
from service.runtime.files.model import said
from service.runtime.files.runs import _edged, _local, _runs_writer

DRAWING = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
# the text properties that name a language: a run's, a paragraph end's, a list's defaults
LABELLED = tuple(DRAWING + name for name in ("rPr", "endParaRPr", "defRPr"))


def _drawing_texts(p) -> Iterator[tuple[list[str], Callable[[list[tuple[int, str]]], None]]]:
    """The texts of a paragraph element (python-pptx's, parsed by its parser) that a
    translator reads: each group of its runs and line breaks (_groups), a break "\\n", with
    the writer of its translation."""
    from pptx.text.text import _Paragraph, _Run

    paragraph = _Paragraph(p, None)
    for group in _groups(p):
        breaks = [_local(child.tag) == "br" for child in group]
        runs = [_Run(child, paragraph) for child in group if _local(child.tag) == "r"]
        sources = [run.text for run in runs]
        texts = iter(sources)
        read = ["\n" if br else next(texts) for br in breaks]
        if said("".join(read)):
            yield read, _past_breaks(breaks, sources, _runs_writer(paragraph, runs, _Run))


def _groups(element) -> Iterator[list]:
    """A paragraph's runs and line breaks, in groups parted by what else it holds (a field:
    a slide number, a date, which stays), each group one text."""
    group: list = []
    for child in element:
        if _local(child.tag) in ("r", "br"):
            group.append(child)
        elif _local(child.tag) not in ("pPr", "endParaRPr"):
            yield group
            group = []
    yield group


def _past_breaks(
    breaks: list[bool], sources: list[str], write: Callable[[list[tuple[int, str]]], None]
):
    """`write` of the runs of text (`sources`) of a paragraph's runs and line breaks
    (`breaks`: which is one): a segment placed in a break goes to the run before it (the one
    after, at the start); a line break a segment holds (the translation carries the
    source's) is a space, the paragraph's own breaks stay, and the white space at a run's
    edge beside one is the source run's (_edged), so a break gains no space."""
    runs = list(itertools.accumulate(not br for br in breaks))  # runs of text up to each
    parted = [False] * (len(sources) + 1)  # whether a break sits before each run, after the last
    for i in itertools.compress(range(len(breaks)), breaks):
        parted[runs[i]] = True
    edged = _edged(sources, parted, write)

    def moved(placed: list[tuple[int, str]]) -> None:
        merged: list[tuple[int, str]] = []
        for i, text in placed:
            run, text = max(runs[i] - 1, 0), re.sub("[\n\v]", " ", text)
            if merged and merged[-1][0] == run:
                text = merged.pop()[1] + text
            merged.append((run, text))
        edged(merged)

    return moved


def _drawing_relabel(roots: list):
    """The `relabel` of DrawingML parts: each language of the text properties (`lang`, and
    the alternative one, `altLang`) in `roots`."""

    def relabel(wanted: Relabel) -> None:
        for root in roots:
            for properties in root.iter(*LABELLED):
                for name in ("lang", "altLang"):
                    value = wanted.value(properties.get(name, ""))
                    if value is not None:
                        properties.set(name, value)

    return relabel
