"""What the office formats (.docx, .pptx, ODF) share in writing a paragraph's runs back:
segments written into copies of python-docx's and python-pptx's runs, the white space kept
beside what stays between runs, an XML element's local name."""

from __future__ import annotations

import copy
import itertools


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


def _runs_writer(paragraph, runs, run_type):
    """The writer of a python-docx or python-pptx paragraph: each segment a copy of its run's
    element (its formatting) holding the segment's text, in place of the runs. Where the
    segments keep their runs' order, each goes where its run was (inside a hyperlink, beside
    a picture or a field that stays); else all go where the first run was, each in copies of
    what holds its run in the paragraph (a hyperlink, a content control: _holders)."""

    def write(placed: list[tuple[int, str]]) -> None:
        ordered = all(a[0] <= b[0] for a, b in itertools.pairwise(placed))
        first = [runs[0]._r, *_holders(paragraph._p, runs[0]._r)][-1]  # the paragraph's child
        for run, text in placed:
            element = copy.deepcopy(runs[run]._r)
            if ordered:
                runs[run]._r.addprevious(element)
            else:
                held = element
                for holder in _holders(paragraph._p, runs[run]._r):
                    held = _emptied_copy(holder, held)
                first.addprevious(held)
            run_type(element, paragraph).text = text
        for run in runs:
            run._r.getparent().remove(run._r)

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


def _local(tag) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""
