"""What the office formats (.docx, .pptx, ODF) share in writing a paragraph's runs back:
segments written into copies of python-docx's and python-pptx's runs, the white space kept
beside what stays between runs, one writer for a text written in several places, an XML
element's local name."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable


def _edged(sources: list[str], parted: list[bool], write):
    """`write` of runs between which something stays (`parted`: whether it sits before each
    run, and after the last; a field, a picture): the white space at a run's edge beside it
    is the source run's. A translation's words carry the space before them, so "Página "
    PAGE " de " came back as "Page" PAGE " of ": "Page1 of 5"."""

    def edged(placed: list[tuple[int, str]]) -> None:
        if any(a[0] > b[0] for a, b in itertools.pairwise(placed)):
            write(placed)  # all where the first run was: nothing stays between them
            return
        out = []
        for run, text in placed:
            source = sources[run]
            if text.strip() and parted[run]:
                text = source[: len(source) - len(source.lstrip())] + text.lstrip()
            if text.strip() and parted[run + 1]:
                text = text.rstrip() + source[len(source.rstrip()) :]
            out.append((run, text))
        write(out)

    return edged


def _each(writers: list[Callable[[list[tuple[int, str]]], None]]):
    """One writer that writes the same segments with every one of `writers`."""

    def write(placed: list[tuple[int, str]]) -> None:
        for writer in writers:
            writer(placed)

    return write


def _runs_writer(paragraph, runs, run_type, renew=None):
    """The writer of a python-docx or python-pptx paragraph: each segment a copy of its run's
    element (its formatting) holding the segment's text, in place of the runs. Where the
    segments keep their runs' order, each goes where its run was (inside a hyperlink, beside
    a picture or a field that stays); else all go where the first run was, each in copies of
    what holds its run in the paragraph (a hyperlink, a content control: _holders), and the
    holders left with no run are taken away (_unwrapped). `renew`, given every (original,
    copy) made, gives the copies fresh ids where theirs would repeat."""

    def write(placed: list[tuple[int, str]]) -> None:
        ordered = all(a[0] <= b[0] for a, b in itertools.pairwise(placed))
        holders = [_holders(paragraph._p, run._r) for run in runs]
        first = [runs[0]._r, *holders[0]][-1]  # the paragraph's child
        copies = []  # (original, its copy) of every element copied
        for run, text in placed:
            element = copy.deepcopy(runs[run]._r)
            copies.append((runs[run]._r, element))
            if ordered:
                runs[run]._r.addprevious(element)
            else:
                held = element
                for holder in holders[run]:
                    held = _emptied_copy(holder, held)
                    copies.append((holder, held))
                first.addprevious(held)
            run_type(element, paragraph).text = text
        for run in runs:
            run._r.getparent().remove(run._r)
        if not ordered:
            for holder in itertools.chain.from_iterable(holders):  # innermost first
                _unwrapped(holder)
        if renew is not None:
            renew(copies)

    return write


def _holders(paragraph, r) -> list:
    """What holds the run `r` in `paragraph`, from the innermost (none where the paragraph
    holds it itself)."""
    holders = []
    while r.getparent() is not paragraph:
        r = r.getparent()
        holders.append(r)
    return holders


def _emptied_copy(holder, element):
    """A copy of `holder` with its attributes and its properties (a link's target, a content
    control's settings) holding `element` alone."""
    copied = holder.makeelement(holder.tag, holder.attrib)
    copied.extend(copy.deepcopy(child) for child in holder if _local(child.tag).endswith("Pr"))
    copied.append(element)
    return copied


def _unwrapped(holder) -> None:
    """`holder` taken away where it holds no run any more (an empty content control shows
    its placeholder, an empty link or insertion is noise), what else it holds (a bookmark,
    a proofing mark) left in its place; its properties go with it."""
    parent = holder.getparent()
    if parent is None or any(_local(e.tag) == "r" for e in holder.iter()):
        return
    for child in list(holder):
        if not _local(child.tag).endswith("Pr"):
            holder.addprevious(child)
    parent.remove(holder)


def _local(tag) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""
