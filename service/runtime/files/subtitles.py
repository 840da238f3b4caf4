"""Subtitles (.srt): each cue's text a paragraph, its number and timing kept, its translation
broken into as many lines as it had; a dialogue a paragraph a line; subtitles' tags read as
HTML."""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from service.runtime.files.model import File, Paragraph, _written_as, said

SRT_TIMING = re.compile(r"^\s*\d+:\d+:\d+[,.]\d+\s*-->")
SRT_TAG = re.compile(r"</?(?:i|b|u|font)\b[^<>]*>", re.IGNORECASE)  # what players read
SRT_SPEAKER = re.compile(r"^([-–—]\s*)(\S.*)$")  # a dialogue's line: a dash, then the words


def _srt(content: str) -> File:
    """Subtitles: each cue's text (its lines after its timing, up to a blank line or the
    next cue) a paragraph, read as one sentence or more; its number and timing kept, its
    translation broken into as many lines as it had, the file's line breaks (and byte order
    mark) as they were, a cue not translated as it was. A dialogue (a cue whose every line
    starts with a dash, a speaker each) is a paragraph a line, its dashes kept. A file with
    subtitles' tags (<i>, <b>, <u>, <font ...>) is read as HTML, so that they come back
    exactly."""
    newline = "\r\n" if "\r\n" in content else "\r" if "\r" in content else "\n"
    lines = content.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    # the first text line of each cue -> (its lines, their translation once written)
    cues: dict[int, tuple[int, list[str] | None]] = {}
    paragraphs, i = [], 0
    while i < len(lines):
        if not SRT_TIMING.match(lines[i]):
            i += 1
            continue
        start = i = i + 1
        while i < len(lines) and lines[i].strip() and not _cue_starts(lines, i):
            i += 1
        if i > start and said(" ".join(lines[start:i])):
            cue = [line.strip() for line in lines[start:i]]
            speakers = [SRT_SPEAKER.match(line) for line in cue]
            if len(cue) > 1 and all(speakers):  # a dialogue: a speaker a line, each its own
                cues[start] = (i - start, lines[start:i])  # as it was until written
                for j, speaker in enumerate(speakers):
                    dash, words = speaker.groups()
                    if said(words):
                        writer = _speaker_writer(cues, start, j, dash)
                        paragraphs.append(Paragraph([words], writer))
                continue
            cues[start] = (i - start, None)
            paragraphs.append(Paragraph([" ".join(cue)], _srt_writer(cues, start)))

    def save() -> bytes:
        out, n = [], 0
        while n < len(lines):
            count, written = cues.get(n, (1, None))
            out += lines[n : n + count] if written is None else written
            n += count
        return newline.join(out).encode()

    tagged = any(SRT_TAG.search(p.text) for p in paragraphs)
    for paragraph in paragraphs if tagged else ():  # its words' "&" and "<" as HTML's text
        paragraph.runs = [_outside_tags(run, _escaped) for run in paragraph.runs]
        # its text as a player shows it: "&amp;" as "&"
        paragraph.write = _written_as(paragraph.write, lambda t: _outside_tags(t, html.unescape))
    return File(paragraphs, "html" if tagged else "plain", save)


def _outside_tags(text: str, change: Callable[[str], str]) -> str:
    """`text` with `change` made to what lies outside its subtitles' tags (SRT_TAG)."""
    pieces = re.split(f"({SRT_TAG.pattern})", text, flags=re.IGNORECASE)
    return "".join(p if i % 2 else change(p) for i, p in enumerate(pieces))


def _escaped(text: str) -> str:
    return html.escape(text, quote=False)


def _cue_starts(lines: list[str], i: int) -> bool:
    """Whether line `i` starts a cue: its timing, or its number before its timing."""
    if SRT_TIMING.match(lines[i]):
        return True
    return (
        lines[i].strip().isdigit() and i + 1 < len(lines) and bool(SRT_TIMING.match(lines[i + 1]))
    )


def _speaker_writer(cues: dict, start: int, line: int, dash: str):
    """The writer of a dialogue line: its dash as it was, then its translation."""

    def write(placed: list[tuple[int, str]]) -> None:
        cues[start][1][line] = dash + "".join(value for _, value in placed).strip()

    return write


def _srt_writer(cues: dict, start: int):
    def write(placed: list[tuple[int, str]]) -> None:
        count, _ = cues[start]
        cues[start] = (count, _lines("".join(value for _, value in placed), count))

    return write


def _lines(text: str, count: int) -> list[str]:
    """`text` broken at spaces (never a tag's) into at most `count` lines of about equal
    length."""
    kept = re.sub(r"<[^<>]*>", lambda tag: tag.group().replace(" ", "\0"), text)
    words, lines = [word.replace("\0", " ") for word in kept.split()], []
    for left in range(count, 0, -1):
        if left == 1 or len(words) <= 1:
            lines.append(" ".join(words))
            break
        width = len(" ".join(words)) / left
        taken, length = 0, -1
        while taken < len(words) - 1 and length + 1 + len(words[taken]) / 2 <= width:
            length += 1 + len(words[taken])
            taken += 1
        taken = max(taken, 1)
        lines.append(" ".join(words[:taken]))
        words = words[taken:]
    return [line for line in lines if line]
