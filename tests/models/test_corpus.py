"""The corpus build on a small fixture in diatheke's plaintext format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.corpus import CorpusRules, build_corpus, clean_text, parse_verses, read_split

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def built(tmp_path):
    spanish = (FIXTURES / "spanish.txt").read_text(encoding="utf-8")
    english = (FIXTURES / "english.txt").read_text(encoding="utf-8")
    stats = build_corpus(spanish, english, tmp_path)
    return stats, tmp_path


def test_markup_is_stripped_and_glued_words_are_split():
    verses = parse_verses((FIXTURES / "english.txt").read_text(encoding="utf-8"))
    assert verses["Genesis 1:1"] == "In the beginning, God created the heavens and the earth."
    assert verses["Genesis 1:2"] == "The earth was formless and empty."
    assert "(engWEB2015eb)" not in verses["Jude 1:25"]


def test_psalm_headings_are_dropped_and_every_reference_is_found():
    verses = parse_verses((FIXTURES / "spanish.txt").read_text(encoding="utf-8"))
    assert verses["Psalms 3:1"] == "¡Oh Jehová, cuánto se han multiplicado mis enemigos!"
    assert verses["Psalms 3:2"].startswith("Muchos dicen")
    assert not any("Salmo de David" in text for text in verses.values())


def test_cleaning_normalises_unicode_entities_and_capitals():
    assert clean_text("Y ACONTECIÓ  en &amp; lo\u0301s") == "Y Aconteció en & lós"
    assert clean_text("Cafe\u0301 , sí") == "Café, sí"


def test_split_by_book_filter_and_dedup(built):
    stats, out = built
    assert (stats.verses_spanish, stats.joined) == (11, 10)  # Genesis 1:4 has no English
    assert stats.dropped_ratio == 1  # Joel 1:2: the English verse is far longer
    assert stats.dropped_duplicate == 1  # Psalms 3:3 repeats Genesis 1:2
    assert stats.kept == {"train": 5, "dev": 1, "test": 2}
    test_es, _ = read_split(out, "test")
    assert test_es[0].startswith("Y Aconteció en los días")
    assert (out / "test.ref").read_text().split("\n")[:2] == ["Ruth 1:1", "Jude 1:25"]
    train_refs = (out / "train.ref").read_text().split()
    assert not any(book in train_refs for book in ("Ruth", "Joel", "Jude"))
    assert json.loads((out / "stats.json").read_text())["stats"]["kept"]["dev"] == 1


def test_length_rules_are_applied(tmp_path):
    spanish = (FIXTURES / "spanish.txt").read_text(encoding="utf-8")
    english = (FIXTURES / "english.txt").read_text(encoding="utf-8")
    stats = build_corpus(spanish, english, tmp_path, CorpusRules(max_words=8))
    assert stats.dropped_length >= 4
    assert (
        sum(stats.kept.values())
        + stats.dropped_length
        + stats.dropped_ratio
        + (stats.dropped_duplicate)
        == stats.joined
    )


def test_unequal_split_files_are_refused(built):
    _, out = built
    (out / "dev.en").write_text("one\ntwo\n")
    with pytest.raises(ValueError, match="1 Spanish lines, 2 English"):
        read_split(out, "dev")
