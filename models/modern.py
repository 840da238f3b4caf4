"""The modern translator's corpus: the Bible corpus, the catalog pairs and the back-translated
pairs mixed into one train / dev / test layout that `attnserve train translator --data` reads.

    train   Bible train + catalog pairs (CLDR included) but the dev slice + synthetic pairs,
            their Spanish prefixed with SYNTHETIC_TAG (a piece of its own in the tokenizer:
            the model learns that such a source is machine Spanish; served text never has it)
            + Apertium's dictionary word pairs (`lexicon`) LEXICON_REPEAT times and the
            everyday patterns filled with them (`phrases`) PHRASE_REPEAT times, human-made
            and untagged, when built; the everyday expressions (`expressions`,
            models.expressions) EXPRESSION_REPEAT times: a few thousand pairs of the turns
            of phrase no other source has. A word pair the model sees a few times an epoch
            it copies instead of translating ("tenedor" after 20 sightings); the repeats
            cost little, batches being counted in tokens and these pairs short
            + the Bible verses that name a people, again in today's spelling
            (`bible-peoples`, PEOPLES_REPEAT times): the 1909 Reina-Valera capitalises
            "los Judíos", "los Fariseos", where Spanish now writes "los judíos"; without
            them the only lower-case "judíos" the model met was the dictionary's adjective
    dev     Bible dev + DEV_PAIRS catalog pairs (a seeded choice, taken out of train), so
            that the dev score the training keeps the best checkpoint by reads modern text too
    test    the Bible test part (`test`), `test-modern` and `test-everyday`, copied unchanged

Everything is read from the two builds of `attnserve data translator` (the Bible corpus, then
`--catalogs`), so the mix is reproducible from them.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from models.corpus import read_split

SYNTHETIC_TAG = "<bt>"
DEV_PAIRS = 500
EXPRESSION_REPEAT = 3
LEXICON_REPEAT = 8
PHRASE_REPEAT = 3
PEOPLES_REPEAT = 2
TEST_PARTS = ("test", "test-modern", "test-everyday")
# Each test split's part in reports: the test split holds the Bible verses of the test books.
PART_NAMES = {"test": "bible", "test-modern": "modern", "test-everyday": "everyday"}
# Peoples and groups the 1909 Reina-Valera writes with a capital (its most frequent ones):
# Spanish now writes them lower-case ("los judíos"). Masculine singular and the plurals;
# not the feminine singular, which is the land's name for some ("Asiria", "Palestina")
BIBLE_PEOPLES = (
    "judío", "gentil", "fariseo", "saduceo", "levita", "egipcio", "caldeo", "filisteo",
    "asirio", "cananeo", "madianita", "moabita", "hebreo", "israelita", "ammonita", "griego",
    "romano", "samaritano", "sidonio", "idumeo", "jebuseo", "amalecita", "palestino",
)  # fmt: skip


def _forms(people: str) -> tuple[str, ...]:
    if people.endswith("o"):
        return people, people + "s", people[:-1] + "as"
    return people, people + ("es" if people.endswith("l") else "s")


_PEOPLE = re.compile(
    r"(?<=[\w,;:] )(" + "|".join(f.capitalize() for p in BIBLE_PEOPLES for f in _forms(p)) + r")\b"
)


def _seeded_order(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted(pairs, key=lambda pair: hashlib.sha256("\t".join(pair).encode()).digest())


def _write(out: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    for side, language in ((0, "es"), (1, "en")):
        text = "".join(pair[side] + "\n" for pair in pairs)
        (out / f"{split}.{language}").write_text(text, encoding="utf-8")


def _pairs(directory: Path, split: str) -> list[tuple[str, str]]:
    spanish, english = read_split(directory, split)
    return list(zip(spanish, english, strict=True))


def modern_peoples(spanish: str) -> str:
    """The verse with the peoples it names in today's lower case; a word that opens the
    verse keeps its capital (it has one for being first)."""
    return _PEOPLE.sub(lambda match: match.group(1).lower(), spanish)


def _peoples_part(bible: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The verses `modern_peoples` changes, in their new spelling."""
    return [
        (modern, english)
        for spanish, english in bible
        if (modern := modern_peoples(spanish)) != spanish
    ]


def build_modern_data(source: Path, out: Path) -> dict:
    """Mixes the builds in `source` (data/translator) into `out`; returns the counts (also
    written to `out/mix.json`)."""
    out.mkdir(parents=True, exist_ok=True)
    catalogs = _pairs(source, "catalogs")
    dev_slice = set(_seeded_order(catalogs)[:DEV_PAIRS])
    synthetic = [(f"{SYNTHETIC_TAG} {s}", e) for s, e in _pairs(source, "synthetic")]
    lexicon, phrases, expressions = (
        _pairs(source, name) if (source / f"{name}.es").exists() else []
        for name in ("lexicon", "phrases", "expressions")
    )
    bible = _pairs(source, "train")
    parts = {
        "bible": bible,
        "bible-peoples": _peoples_part(bible) * PEOPLES_REPEAT,
        "catalogs": [pair for pair in catalogs if pair not in dev_slice],
        "synthetic": synthetic,
        "lexicon": lexicon * LEXICON_REPEAT,
        "phrases": phrases * PHRASE_REPEAT,
        "expressions": expressions * EXPRESSION_REPEAT,
    }
    train = [pair for part in parts.values() for pair in part]
    dev = _pairs(source, "dev") + [pair for pair in catalogs if pair in dev_slice]
    _write(out, "train", train)
    _write(out, "dev", dev)
    for part in TEST_PARTS:
        for language in ("es", "en"):
            shutil.copyfile(source / f"{part}.{language}", out / f"{part}.{language}")
    counts = {
        "train": {name: len(pairs) for name, pairs in parts.items()} | {"total": len(train)},
        "dev": {"bible": len(dev) - len(dev_slice), "catalogs": len(dev_slice)},
        "test": {part: len(read_split(out, part)[0]) for part in TEST_PARTS},
        "synthetic_tag": SYNTHETIC_TAG,
    }
    (out / "mix.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")
    return counts
