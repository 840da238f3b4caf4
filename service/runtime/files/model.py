"""What every format of a file translated whole is read into: a `File` of `Paragraph`s,
each a list of runs (spans of one formatting) with the writer that puts its translation
back; the paragraphs sent in `Batch`es, a longer one in parts whose translations are
`joined` before its writer cuts them into its runs (alignment.segments)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from service.runtime import documents, languages, markup
from service.runtime.files.alignment import segments
from service.runtime.files.labels import Relabel
from service.runtime.tokenizer import visible

HTML_PIECE = 20_000  # characters of an HTML file translated as one text, where blocks allow


@dataclass
class Paragraph:
    runs: list[str]  # the text of each run, in order
    write: Callable[[list[tuple[int, str]]], None]  # (run, text) segments -> the paragraph

    @property
    def text(self) -> str:
        return "".join(self.runs)


@dataclass
class File:
    paragraphs: list[Paragraph]
    text_format: str  # "plain" or "html": how each paragraph's text is read
    save: Callable[[], bytes]
    most: int = HTML_PIECE  # characters of one text: a longer paragraph goes in parts
    # the languages the file declares made the target's where they are the source's, in
    # what `save` writes (before or after the paragraphs are written); none: it declares none
    relabel: Callable[[Relabel], None] = lambda relabel: None

    def declare(self, source: str, target: str) -> None:
        """The file saved declaring the `target` language where it declared `source`'s (the
        model's codes, written as BCP 47 tags: languages.tag); nothing where either is
        unknown (empty)."""
        if source and target:
            self.relabel(Relabel(languages.tag(source), languages.tag(target)))

    def parts(self, paragraph: Paragraph) -> list[markup.Part]:
        """The parts `paragraph` is translated as: its text, or (longer than `most`
        characters) its parts cut after sentences' ends, plain text by `documents.pieces`,
        HTML outside its tags by `markup.parts`; ValueError where one sentence is longer."""
        text = paragraph.text
        if len(text) <= self.most:
            return [markup.Part(text)]
        if self.text_format == "html":
            return markup.parts(text, self.most)
        return [markup.Part(p) for p in documents.pieces(text, self.most, whole_sentences=True)]

    @functools.cached_property
    def cut(self) -> list[list[markup.Part]]:
        """Each paragraph's parts (`parts`), cut once: read_file cuts them as it checks them."""
        return [self.parts(p) for p in self.paragraphs]

    def batches(self, size: int) -> Iterator[Batch]:
        """The paragraphs' texts `size` at a time, as one translation call sends them (a
        part of white space alone is not sent: it is its own translation)."""
        cut = self.cut
        sent = [
            (i, j)
            for i, parts in enumerate(cut)
            for j, part in enumerate(parts)
            if said(part.source)
        ]
        done: list[list[dict | None]] = [[None] * len(parts) for parts in cut]
        for start in range(0, len(sent), size):
            yield Batch(self.paragraphs, cut, done, sent[start : start + size])


@dataclass
class Batch:
    """Texts translated in one call (paragraphs, or parts of paragraphs), whether the call
    must return alignments (a paragraph of several runs is cut back into them by them), and
    `write`, which writes each paragraph whose last part is among them."""

    all_paragraphs: list[Paragraph]
    cut: list[list[markup.Part]]  # each paragraph's parts
    done: list[list[dict | None]]  # each part's translation, once translated
    taken: list[tuple[int, int]]  # (paragraph, part) of each text

    @property
    def texts(self) -> list[str]:
        return [self.cut[i][j].text for i, j in self.taken]

    @property
    def aligned(self) -> bool:
        return any(len(self.all_paragraphs[i].runs) > 1 for i, _ in self.taken)

    @property
    def paragraphs(self) -> list[Paragraph]:
        """The paragraphs `write` writes: those whose last part is translated here."""
        return [self.all_paragraphs[i] for i in self._finished()]

    def _finished(self) -> list[int]:
        return [
            i for i, j in self.taken if not said("".join(p.source for p in self.cut[i][j + 1 :]))
        ]

    def write(self, translations: list[dict]) -> None:
        """Each text's translation (the /v1 JSON of a Translation); each paragraph finished
        here into its runs."""
        for (i, j), translation in zip(self.taken, translations, strict=True):
            self.done[i][j] = translation
        for i in self._finished():
            paragraph = self.all_paragraphs[i]
            paragraph.write(segments(paragraph.runs, joined(self.cut[i], self.done[i])))


def joined(parts: list[markup.Part], translations: list[dict | None]) -> dict:
    """The /v1 JSON of a paragraph's translation from its parts' (None: a part of white
    space, its own translation): the texts joined (each without the tags its part added:
    Part.unwrapped), each sentence's spans moved to where its part lies, a part's alignment
    of its one sentence on that sentence."""
    if len(parts) == 1:
        return translations[0]
    texts, sentences, source, target = [], [], 0, 0
    for part, translation in zip(parts, translations, strict=True):
        best = translation["hypotheses"][0] if translation else {"text": part.text}
        whole = best.get("text", "")  # JSON leaves an empty one out
        begin, end = part.unwrapped(whole)
        text, opened, length = whole[begin:end], len(part.opened), len(part.source)
        spans = translation.get("sentences", []) if translation else []
        if translation and not spans:
            spans = [{"sourceEnd": len(part.text), "targetEnd": len(whole)}]
        for span in spans:
            moved = {
                **span,
                "sourceStart": source + markup.within(span.get("sourceStart", 0), opened, length),
                "sourceEnd": source + markup.within(span.get("sourceEnd", 0), opened, length),
                "targetStart": target + markup.within(span.get("targetStart", 0), begin, len(text)),
                "targetEnd": target + markup.within(span.get("targetEnd", 0), begin, len(text)),
            }
            if len(spans) == 1 and "alignment" not in span and "alignment" in best:
                moved["alignment"] = best["alignment"]
            sentences.append(moved)
        texts.append(text)
        source, target = source + len(part.source), target + len(text)
    return {"hypotheses": [{"text": "".join(texts)}], "sentences": sentences}


def said(text: str) -> bool:
    """Whether `text` holds anything a translator reads (a text of white space and
    invisible characters alone, tokenizer.INVISIBLE, is refused as empty): else it is kept
    as it is."""
    return bool(visible(text).strip())


def _written_as(write: Callable[[list[tuple[int, str]]], None], change: Callable[[str], str]):
    """`write` of segments each with `change` made to its text (XML_UNSAFE left out of an
    XML format, a subtitle's text unescaped)."""
    return lambda placed: write([(run, change(text)) for run, text in placed])
