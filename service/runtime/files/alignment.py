"""Where a translation's words go: a translated paragraph cut back into the runs (spans of one
formatting) of its source, each target word in the run of the source word it attends to
most, by the alignment a translation returns."""

from __future__ import annotations

from collections import Counter

WORD = "\u2581"  # SentencePiece's word start


def segments(runs: list[str], translation: dict) -> list[tuple[int, str]]:
    """A translated paragraph as (run, text) segments, from the /v1 JSON of its translation
    (with alignments): each target word in the run of the source word it attends to most;
    a sentence whose words cannot be matched goes whole to the run most of it came from."""
    target = translation["hypotheses"][0].get("text", "")  # JSON leaves an empty one out
    if len(runs) == 1:
        return [(0, target)]
    starts, position = [], 0
    for text in runs:  # the source character each run starts at
        starts.append(position)
        position += len(text)
    placed: list[tuple[int, str]] = []
    written = 0
    sentences = translation.get("sentences", [])
    whole = translation["hypotheses"][0].get("alignment")  # a text of one sentence has it here
    for sentence in sentences:
        begin, end = sentence.get("targetStart", 0), sentence.get("targetEnd", 0)
        if begin > written:  # what lies between sentences goes with the one before
            placed.append((placed[-1][0] if placed else 0, target[written:begin]))
        source = (sentence.get("sourceStart", 0), sentence.get("sourceEnd", 0))
        alignment = sentence.get("alignment") or (whole if len(sentences) == 1 else None)
        placed += _sentence(starts, source, target[begin:end], alignment)
        written = end
    if written < len(target):
        placed.append((placed[-1][0] if placed else 0, target[written:]))
    merged: list[tuple[int, str]] = []
    for run, text in placed:
        if merged and merged[-1][0] == run:
            merged[-1] = (run, merged[-1][1] + text)
        elif text:
            merged.append((run, text))
    return merged or [(0, "")]


def _run_at(starts: list[int], character: int) -> int:
    run = 0
    for i, start in enumerate(starts):
        if start <= character:
            run = i
    return run


def _words(pieces: list[str]) -> list[list[int]]:
    """Piece indices grouped into words (a word starts at a piece with WORD)."""
    words: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if piece == "</s>":
            continue
        if piece.startswith(WORD) or not words:
            words.append([i])
        else:
            words[-1].append(i)
    return words


def _sentence(starts, source: tuple[int, int], target: str, alignment) -> list[tuple[int, str]]:
    begin, end = source
    if not alignment:
        return [(_run_at(starts, (begin + end) // 2), target)]
    pieces_in, pieces_out = alignment["sourceTokens"], alignment["targetTokens"]
    weights = alignment["weights"]
    # each source piece's character in the sentence, by the pieces' lengths
    lengths = [len(p.replace(WORD, " ")) if p != "</s>" else 0 for p in pieces_in]
    total = sum(lengths) or 1
    at, characters = 0, []
    for length in lengths:
        characters.append(begin + round((at + length / 2) / total * (end - begin)))
        at += length
    piece_run = []
    for t in range(len(pieces_out)):
        row = weights[t * len(pieces_in) : (t + 1) * len(pieces_in)]
        best = max(range(len(row)), key=lambda s: (row[s], -s)) if row else 0
        if pieces_in and pieces_in[best] == "</s>" and len(row) > 1:  # the end says nothing
            best = max(range(len(row) - 1), key=lambda s: row[s])
        piece_run.append(_run_at(starts, characters[best]) if characters else 0)
    words = _words(pieces_out)
    spaced = target.split(" ")
    if len(words) != len(spaced):  # the text is not the pieces' (items put back): whole
        said = [run for run, piece in zip(piece_run, pieces_out, strict=True) if piece != "</s>"]
        runs = Counter(said).most_common(1)
        return [(runs[0][0] if runs else 0, target)]
    placed = []
    for i, (word, text) in enumerate(zip(words, spaced, strict=True)):
        run = Counter(piece_run[p] for p in word).most_common(1)[0][0]
        placed.append((run, (" " if i else "") + text))
    return placed
