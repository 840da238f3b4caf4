"""Spanish sentence segmenters side by side: boundaries found against a gold set, and speed.

The gold set (bench/data/segmentation-es.txt) holds sentences one a line, paragraphs apart by
a blank line: each paragraph is joined with single spaces and given to every segmenter, whose
sentence ends are compared with the gold ones (precision, recall, F1 of the boundaries inside
paragraphs). Speed: the whole set segmented again and again for about a second (each round's
texts made new), characters a second. The translation test split's sources (several
sentences on some lines) are segmented too, for the sentences a line each segmenter finds.

    python -m bench.segmenters [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.lib.paths import TEST_SOURCES

GOLD = Path(__file__).resolve().parent / "data" / "segmentation-es.txt"


def paragraphs(path: Path = GOLD) -> list[list[str]]:
    """The gold set's paragraphs, each a list of sentences."""
    found, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        if line.strip():
            current.append(line.strip())
        elif current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    return found


def _ends(sentences: list[str], text: str) -> set[int]:
    """Character offsets in `text` where each sentence but the last ends (spaces trimmed)."""
    ends, cursor = set(), 0
    for sentence in sentences[:-1]:
        start = text.index(sentence.strip(), cursor)
        cursor = start + len(sentence.strip())
        ends.add(cursor)
    return ends


def segmenters() -> dict[str, Callable[[str], list[str]]]:
    """Each candidate's sentences of a text (imports only the installed ones)."""
    found: dict[str, Callable[[str], list[str]]] = {}
    try:
        import sentencex

        found["sentencex"] = lambda text: list(sentencex.segment("es", text))
    except ImportError:
        pass
    try:
        import pysbd

        segmenter = pysbd.Segmenter(language="es", clean=False)
        found["pysbd"] = segmenter.segment
    except ImportError:
        pass
    try:
        import syntok.segmenter as syntok

        def split(text: str) -> list[str]:
            return [
                "".join(t.spacing + t.value for t in sentence)
                for paragraph in syntok.process(text)
                for sentence in paragraph
            ]

        found["syntok"] = split
    except ImportError:
        pass
    return found


def measure(split: Callable[[str], list[str]], gold: list[list[str]]) -> dict:
    right = found = wanted = 0
    missed, wrong = [], []
    for sentences in gold:
        text = " ".join(sentences)
        want = _ends(sentences, text)
        got = _ends([s for s in split(text) if s.strip()], text)
        right += len(want & got)
        found += len(got)
        wanted += len(want)
        missed += [text[max(0, e - 25) : e + 10] for e in sorted(want - got)]
        wrong += [text[max(0, e - 25) : e + 10] for e in sorted(got - want)]
    precision, recall = right / max(found, 1), right / max(wanted, 1)
    texts = [" ".join(s) for s in gold]
    characters, start, rounds = sum(map(len, texts)), time.perf_counter(), 0
    while time.perf_counter() - start < 1.0:
        for text in texts:
            split(f"{text} Fin {rounds}.")  # a new text each round: no segmenter's cache helps
        rounds += 1
    seconds = time.perf_counter() - start
    return {
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(2 * precision * recall / max(precision + recall, 1e-9), 4),
        "boundaries": wanted,
        "characters_per_s": round(rounds * characters / seconds),
        "missed": missed,
        "wrong": wrong,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    gold = paragraphs()
    lines = [x for x in TEST_SOURCES.read_text(encoding="utf-8").splitlines() if x.strip()]
    report = {"gold_paragraphs": len(gold), "segmenters": {}}
    for name, split in segmenters().items():
        entry = measure(split, gold)
        entry["test_split_sentences_a_line"] = round(
            sum(len([s for s in split(x) if s.strip()]) for x in lines) / len(lines), 3
        )
        report["segmenters"][name] = entry
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0
    print(f"{len(gold)} paragraphs, {sum(len(p) - 1 for p in gold)} boundaries inside them")
    for name, e in report["segmenters"].items():
        print(
            f"{name}: precision {e['precision']:.3f}, recall {e['recall']:.3f}, "
            f"F1 {e['f1']:.3f}, {e['characters_per_s']:,} characters/s, "
            f"{e['test_split_sentences_a_line']} sentences a test line"
        )
        for kind in ("missed", "wrong"):
            for context in e[kind][:6]:
                print(f"  {kind}: {context!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
