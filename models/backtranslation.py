"""Synthetic pairs by back-translation: real English sentences, their Spanish made by Apertium
eng-spa (rule-based, offline, about 1,500 sentences a second here).

The English side is the target the model learns to write, so it must be real: sentences from
the `fortunes` and `fortunes-min` packages (quotations, jokes, proverbs) and the usage examples
of WordNet (`wordnet-base`: short sentences and phrases of everyday English, "the bread crusted
in the oven", "my fate is in your hands"), and the English example sentences of the Ding
German-English dictionary (`trans-de-en`: "Are you allowed to park here?", "Thank you for
visiting us, and have a safe journey home."), the everyday English the other sources lack.
Apertium's Spanish is only ever a source, and the pairs are kept apart (`synthetic.{es,en}`) so
training can tag them as synthetic sources. Apertium's own English output is never trained on.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

FORTUNE_PACKAGES = ("fortunes", "fortunes-min")
FORTUNES = "*/games/fortunes/*"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
_PROSE = re.compile(r"^[A-Z][A-Za-z ,;:'\"!?.\-]*[.!?]$")
_ATTRIBUTION = re.compile(r"^\s*(--|-- |~|\()")
MIN_WORDS, MAX_WORDS = 4, 25
WORDNET_PACKAGE = "wordnet-base"
WORDNET = "*/wordnet/data.*"
_EXAMPLE = re.compile(r'"([^"]+)"')
_PLAIN = re.compile(r"^[A-Za-z][A-Za-z ,;:'!?.\-]*$")
EXAMPLE_MIN_WORDS = 2
DING_PACKAGE = "trans-de-en"
DING = "*/trans/de-en"
_LEFT_ENGLISH = re.compile(r"(?<!\w)[*@][a-z]")
_MARK = re.compile(r"(?<!\w)[*@#](?=\w)|~")  # the marks a word starts with
_CURLY = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})


def fortune_sentences(tree: Path) -> list[str]:
    """Sentences of the fortune files under `tree`: one line each, plain prose of
    MIN_WORDS..MAX_WORDS words, deduplicated, in file and fortune order."""
    sentences = []
    files = sorted(p for p in tree.rglob("fortunes/*") if p.is_file() and p.suffix == "")
    for path in files:
        text = path.read_text(encoding="latin-1")
        for fortune in text.split("\n%\n"):
            lines = [line.strip() for line in fortune.splitlines()]
            body = " ".join(line for line in lines if line and not _ATTRIBUTION.match(line))
            for sentence in _SENTENCE_END.split(re.sub(r"\s+", " ", body)):
                sentence = sentence.strip()
                if _PROSE.match(sentence) and MIN_WORDS <= len(sentence.split()) <= MAX_WORDS:
                    sentences.append(sentence)
    return list(dict.fromkeys(sentences))


def wordnet_examples(tree: Path) -> list[str]:
    """The usage examples of the WordNet data files under `tree` (the quoted parts of each
    synset's gloss): plain text of EXAMPLE_MIN_WORDS..MAX_WORDS words, deduplicated, in file
    and synset order."""
    examples = []
    for path in sorted(p for p in tree.rglob("data.*") if p.is_file()):
        for line in path.read_text(encoding="latin-1").splitlines():
            if line.startswith(" ") or "|" not in line:  # the licence header, or no gloss
                continue
            for example in _EXAMPLE.findall(line.split("|", 1)[1]):
                example = re.sub(r"\s+", " ", example).strip()
                words = len(example.split())
                if _PLAIN.match(example) and EXAMPLE_MIN_WORDS <= words <= MAX_WORDS:
                    examples.append(example)
    return list(dict.fromkeys(examples))


def ding_sentences(tree: Path) -> list[str]:
    """The English sentences of the Ding dictionary files under `tree`: of each entry's
    English side ("German :: English"; senses split by `|`, variants by `;`), the parts that
    are one plain sentence of MIN_WORDS..MAX_WORDS words (a capital first, `.`, `!` or `?`
    last). Parts with alternatives or notes (`/`, brackets, ellipses) are left out, as their
    text is not one sentence. Deduplicated, in file order."""
    sentences = []
    for path in sorted(p for p in tree.rglob("de-en") if p.is_file()):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("#") or "::" not in line:
                continue
            for part in re.split(r"[|;]", line.split("::", 1)[1]):
                part = re.sub(r"\s+", " ", part.translate(_CURLY)).strip()
                if _PROSE.match(part) and MIN_WORDS - 1 <= len(part.split()) <= MAX_WORDS:
                    sentences.append(part)
    return list(dict.fromkeys(sentences))


def apertium_eng_spa(sentences: list[str]) -> list[str]:
    """Spanish of every sentence by Apertium eng-spa, one line in, one line out, with its
    marks: `*word` a word Apertium does not know, `@word` one its bilingual dictionary lacks
    (both left in English), `#word` a form it could not generate."""
    if not sentences:
        return []
    result = subprocess.run(
        ["apertium", "-f", "line", "eng-spa"],
        input="\n".join(sentences) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.split("\n")[: len(sentences)]
    if len(lines) != len(sentences):
        raise RuntimeError(f"apertium gave {len(lines)} lines for {len(sentences)} sentences")
    return [re.sub(r"\s+", " ", line).strip() for line in lines]


def leaves_english(marked: str) -> bool:
    """Apertium left a common English word in the Spanish (`*knob`, `@office`): such a source
    teaches the model that a word it does not know is copied, and it then writes "a tenedor"
    for "un tenedor". Unknown names (`*Bob`) are copied rightly and do not count."""
    return _LEFT_ENGLISH.search(marked) is not None


def unmarked(marked: str) -> str:
    return re.sub(r"\s+", " ", _MARK.sub("", marked)).strip()


def synthetic_pairs(sentences: list[str]) -> list[tuple[str, str]]:
    """(Apertium's Spanish, the real English) of every sentence Apertium translated whole:
    none it left a common English word in (`leaves_english`)."""
    spanish = apertium_eng_spa(sentences)
    return [
        (unmarked(s), e)
        for s, e in zip(spanish, sentences, strict=True)
        if s and not leaves_english(s) and unmarked(s) != e
    ]
