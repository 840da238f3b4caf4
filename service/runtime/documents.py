"""Long texts as sentences: split for decoding, put back together around their translations.

A text is cut at its line breaks first (a paragraph break is two), then each line into
sentences by sentencex (Wikimedia's segmenter, which knows Spanish abbreviations such as
"Sr." and "EE. UU."; `python -m bench.segmenters` measures it against the others). Every
character that is not inside a sentence (the white space between sentences, line breaks,
blank lines, a text's leading and trailing space) is kept as it is and put back between the
translations, so a translated document keeps its layout. Offsets are in characters (Unicode
code points) of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sentencex

LANGUAGE = "es"  # the source language of the served translators
_LINE = re.compile(r"[^\r\n]+")
# white space beyond ASCII, each read by the segmenter as one plain space (as long, so every
# offset holds): sentencex slices by bytes around a period and panics on a capital, such a
# space and a period ("J\u00a0.")
_WIDE_SPACES = {c: " " for c in range(0x80, 0x3001) if chr(c).isspace()}


@dataclass(frozen=True)
class Document:
    """A text and the spans (start, end) of its sentences, in order."""

    text: str
    sentences: tuple[tuple[int, int], ...]

    def sentence_texts(self) -> list[str]:
        return [self.text[start:end] for start, end in self.sentences]

    def join(self, translations: list[str]) -> tuple[str, list[tuple[int, int]]]:
        """The translated text (each sentence replaced by its translation, everything between
        kept) and the spans of the translations in it. Fewer translations than sentences give
        the text's start, up to the last one translated."""
        if len(translations) > len(self.sentences):
            raise ValueError(f"{len(translations)} translations of {len(self.sentences)} sentences")
        parts, spans, cursor, length = [], [], 0, 0
        for (start, end), translation in zip(self.sentences, translations, strict=False):
            between = self.text[cursor:start]
            parts += [between, translation]
            length += len(between)
            spans.append((length, length + len(translation)))
            length += len(translation)
            cursor = end
        if len(translations) == len(self.sentences):
            parts.append(self.text[cursor:])
        return "".join(parts), spans


# the end of a sentence followed by white space: where a long text may be cut. Read from the
# first mark of a run only, each part whole: a run not followed by white space is then read
# once, not again from each of its marks
SENTENCE_CUT = re.compile(r"(?<![.!?…。！？])[.!?…。！？]++[\"')\]»”’]*+\s+")


def pieces(text: str, most: int, whole_sentences: bool = False) -> list[str]:
    """`text` in pieces of at most `most` characters whose concatenation is the text (none
    for an empty one), each cut after a paragraph break where one is, else after a line
    break, else after a sentence's end, else after a space, else at `most`. With
    `whole_sentences` never after a space or at `most`: ValueError where a sentence is
    longer than `most`."""
    cut_pieces = []
    while len(text) > most:
        window = text[:most]
        cut = window.rfind("\n\n") + 2 if window.rfind("\n\n") > 0 else window.rfind("\n") + 1
        if not cut:
            ends = [m.end() for m in SENTENCE_CUT.finditer(window)]
            if not ends and whole_sentences:
                raise ValueError(f"a sentence longer than {most} characters")
            cut = ends[-1] if ends else window.rfind(" ") + 1
        cut = cut or most
        cut_pieces.append(text[:cut])
        text = text[cut:]
    return [*cut_pieces, text] if text else cut_pieces


SPLITTING = ("sentences", "lines", "none")  # where a text is cut, finest first


def split_text(text: str, splitting: str = "sentences") -> Document:
    """The text's sentences: each line segmented on its own (each line one sentence with
    "lines", the whole text one with "none"), every sentence trimmed of the white space
    around it."""
    if splitting == "none":
        start = len(text) - len(text.lstrip())
        return Document(text, ((start, start + len(text.strip())),) if text.strip() else ())
    spans, segmented = [], text.translate(_WIDE_SPACES)
    for line in _LINE.finditer(segmented):
        cursor = line.start()
        pieces = [line.group()] if splitting == "lines" else _sentences(line.group())
        for sentence in pieces:
            stripped = sentence.strip()
            if not stripped:
                continue
            start = segmented.index(stripped, cursor, line.end())
            spans.append((start, start + len(stripped)))
            cursor = start + len(stripped)
    if not spans and text.strip():  # nothing the segmenter calls a sentence: all of it
        return split_text(text, "none")
    return Document(text, tuple(spans))


def _sentences(line: str) -> list[str]:
    return list(sentencex.segment(LANGUAGE, line))
