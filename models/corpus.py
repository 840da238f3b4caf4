"""The Spanish-English corpus: verse-aligned Bible text from Debian's SWORD packages.

Reina-Valera 1909 (Spanish) and the World English Bible (English) are both public domain.
`build_corpus` reads both through `diatheke`, strips the OSIS markup, joins the verses on their
reference, cleans and filters the pairs, and splits them by book so that no test verse can
leak into training.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from models.packages import ensure_debian_packages

SPANISH_MODULE = "spaRV1909eb"
ENGLISH_MODULE = "engWEB2015eb"
DEBIAN_PACKAGES = ("diatheke", "sword-text-sparv", "sword-text-web")
WHOLE_BIBLE = "Genesis 1:1-Revelation of John 22:21"

# The split is a rule over books, fixed here once: test and dev books never reach training.
TEST_BOOKS = ("Ruth", "Esther", "Jonah", "Philippians", "James", "I Peter", "Philemon", "Jude")
DEV_BOOKS = ("Joel", "Colossians", "Titus")
SPLITS = ("train", "dev", "test")

# A verse reference such as "I Samuel 3:4: " or "Revelation of John 22:21: ". Psalm headings
# repeat in front of later verses, so references are found anywhere in the text, not per line.
_REFERENCE = re.compile(r"((?:I{1,3} )?[A-Z][a-z]+(?: of [A-Z][a-z]+)?) (\d+):(\d+): ")
# Elements whose content is not verse text.
_DROPPED_ELEMENTS = re.compile(r"<(title|note|seg)\b[^>]*>.*?</\1>", re.DOTALL)
_GLUED_WORDS = re.compile(r"(?<=\w)</w><w\b")  # "God</w><w ...>created": two words, no space
_TAG = re.compile(r"<[^>]+>")
_MODULE_TRAILER = re.compile(rf"\((?:{SPANISH_MODULE}|{ENGLISH_MODULE})\)\s*$")
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r" ([,.;:!?)\]”’»])")
# Reina-Valera opens each chapter with words in capitals ("Y ACONTECIÓ en", "OH JEHOVÁ");
# inputs to the model will not, so such words become capitalised.
_CAPITALS = re.compile(r"\b([A-ZÁÉÍÓÚÑ])([A-ZÁÉÍÓÚÑ]+)\b")


@dataclass(frozen=True)
class CorpusRules:
    """Cleaning and filtering thresholds."""

    min_words: int = 1
    max_words: int = 80  # longer verses are rare and cost quadratic attention in training
    max_length_ratio: float = 2.0  # characters, either way; drops verses of other versification


@dataclass
class CorpusStats:
    """What the build read, dropped and kept; written to `stats.json` beside the data."""

    verses_spanish: int = 0
    verses_english: int = 0
    joined: int = 0
    dropped_length: int = 0
    dropped_ratio: int = 0
    dropped_duplicate: int = 0
    kept: dict[str, int] = field(default_factory=dict)


def clean_text(text: str) -> str:
    """Plain NFC text from one verse of OSIS markup."""
    text = _GLUED_WORDS.sub("</w> <w", text)
    text = _DROPPED_ELEMENTS.sub(" ", text)
    text = _TAG.sub("", text)
    text = html.unescape(text)
    text = unicodedata.normalize("NFC", text)
    text = _SPACE.sub(" ", text).strip()
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return _CAPITALS.sub(lambda m: m[1] + m[2].lower(), text)


def parse_verses(raw: str) -> dict[str, str]:
    """Maps "Book C:V" to the cleaned verse text, from `diatheke -f plaintext` output."""
    raw = _MODULE_TRAILER.sub("", raw)
    raw = _DROPPED_ELEMENTS.sub(" ", raw)  # before splitting: headings hold no references
    parts = _REFERENCE.split(raw)
    verses = {}
    # parts = [prefix, book, chapter, verse, text, book, chapter, verse, text, ...]
    for i in range(1, len(parts) - 3, 4):
        book, chapter, verse, text = parts[i : i + 4]
        text = clean_text(text)
        if text:
            verses[f"{book} {chapter}:{verse}"] = text
    return verses


def split_of(reference: str) -> str:
    book = reference.rsplit(" ", 1)[0]
    if book in TEST_BOOKS:
        return "test"
    if book in DEV_BOOKS:
        return "dev"
    return "train"


def filter_pairs(
    pairs: Iterable[tuple[str, str, str]], rules: CorpusRules, stats: CorpusStats
) -> Iterator[tuple[str, str, str]]:
    """Drops pairs out of length bounds, with a suspicious length ratio, or seen before."""
    seen = set()
    for reference, spanish, english in pairs:
        words = max(len(spanish.split()), len(english.split()))
        if not rules.min_words <= words <= rules.max_words:
            stats.dropped_length += 1
            continue
        ratio = len(spanish) / max(len(english), 1)
        if not 1 / rules.max_length_ratio <= ratio <= rules.max_length_ratio:
            stats.dropped_ratio += 1
            continue
        if (spanish, english) in seen:
            stats.dropped_duplicate += 1
            continue
        seen.add((spanish, english))
        yield reference, spanish, english


def read_module(module: str) -> str:
    if shutil.which("diatheke") is None:
        raise RuntimeError("diatheke is not installed (Debian package diatheke)")
    result = subprocess.run(
        ["diatheke", "-b", module, "-f", "plaintext", "-k", WHOLE_BIBLE],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def build_corpus(
    spanish_raw: str, english_raw: str, out_dir: Path, rules: CorpusRules = CorpusRules()
) -> CorpusStats:
    """Writes `{split}.es`, `{split}.en`, `{split}.ref` (one verse a line) and `stats.json`."""
    stats = CorpusStats()
    spanish, english = parse_verses(spanish_raw), parse_verses(english_raw)
    stats.verses_spanish, stats.verses_english = len(spanish), len(english)
    joined = [(ref, text, english[ref]) for ref, text in spanish.items() if ref in english]
    stats.joined = len(joined)
    by_split: dict[str, list[tuple[str, str, str]]] = {name: [] for name in SPLITS}
    for pair in filter_pairs(joined, rules, stats):
        by_split[split_of(pair[0])].append(pair)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in by_split.items():
        stats.kept[name] = len(rows)
        for column, suffix in enumerate(("ref", "es", "en")):
            lines = "".join(row[column] + "\n" for row in rows)
            (out_dir / f"{name}.{suffix}").write_text(lines, encoding="utf-8")
    summary = {"rules": asdict(rules), "stats": asdict(stats)}
    (out_dir / "stats.json").write_text(json.dumps(summary, indent=2) + "\n")
    return stats


def build_translator_data(out_dir: Path) -> CorpusStats:
    """The whole build from the installed packages (installing them when missing)."""
    ensure_debian_packages(DEBIAN_PACKAGES)
    return build_corpus(read_module(SPANISH_MODULE), read_module(ENGLISH_MODULE), out_dir)


def read_split(data_dir: Path, split: str) -> tuple[list[str], list[str]]:
    """The (spanish, english) lines of one split."""
    spanish = (data_dir / f"{split}.es").read_text(encoding="utf-8").splitlines()
    english = (data_dir / f"{split}.en").read_text(encoding="utf-8").splitlines()
    if len(spanish) != len(english):
        raise ValueError(
            f"{data_dir}/{split}: {len(spanish)} Spanish lines, {len(english)} English"
        )
    return spanish, english
