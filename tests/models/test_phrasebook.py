"""Everyday sentence pairs from patterns and dictionary words (models.phrasebook)."""

from __future__ import annotations

import re
from collections import Counter

from models.lexicon import Entry
from models.phrasebook import (
    COMMON_ADJECTIVES,
    NOUN_PATTERNS,
    PER_ADJECTIVE,
    PER_NOUN,
    PER_VERB,
    english_indefinite,
    phrase_pairs,
    spanish_feminine,
)

ENTRIES = [
    Entry("tenedor", "fork", "n", "m"),
    Entry("mesa", "table", "n", "f"),
    Entry("agua", "water", "n", "f"),  # feminine with a stressed a: "el agua"; left out
    Entry("gafas", "glasses", "n", "f"),  # plural in form; left out
    Entry("estudiante", "student", "n", "mf"),  # both genders; left out
    Entry("percusor", "striker", "n", "m"),  # a rare Spanish word; left out
    Entry("traer", "bring", "vblex"),
    Entry("rápido", "fast", "adj"),
]
COUNTS = Counter(
    dict.fromkeys(
        [
            "tenedor",
            "fork",
            "mesa",
            "table",
            "agua",
            "water",
            "gafas",
            "glasses",
            "estudiante",
            "student",
            "striker",
            "traer",
            "bring",
            "rápido",
            "fast",
        ],
        10,
    )
)


def test_english_takes_a_or_an_by_sound():
    assert english_indefinite("fork") == "a fork"
    assert english_indefinite("apple") == "an apple"
    assert english_indefinite("university") == "a university"
    assert english_indefinite("hour") == "an hour"


def test_spanish_adjectives_agree_by_ending():
    assert spanish_feminine("rápido") == "rápida"
    assert spanish_feminine("trabajador") == "trabajadora"
    assert spanish_feminine("grande") == "grande"
    assert spanish_feminine("azul") == "azul"


def test_patterns_are_filled_with_common_words_in_agreement():
    pairs = phrase_pairs(ENTRIES, COUNTS)
    spanish = " ".join(s for s, _ in pairs)
    for absent in ("agua", "gafas", "estudiante", "percusor"):
        assert absent not in spanish
    assert len(pairs) == len(set(pairs)) == 2 * PER_NOUN + PER_VERB + PER_ADJECTIVE
    for s, e in pairs:
        assert "{" not in s + e and s.lstrip("¿¡")[0].isupper() and e[0].isupper()
        if "mesa" in s:
            assert "table" in e and " el mesa" not in s and " un mesa" not in s
            assert not any(f" {m} " in s + " " for m, f, _, _ in COMMON_ADJECTIVES if m != f)
        if "tenedor" in s:
            assert "fork" in e and not re.search(r"\b(a|de) el\b", s)  # "al", "del"
        if "traer" in s:
            assert "bring" in e


def test_the_choice_is_seeded():
    assert phrase_pairs(ENTRIES, COUNTS) == phrase_pairs(ENTRIES, COUNTS)
    assert phrase_pairs(ENTRIES, COUNTS) != phrase_pairs(ENTRIES, COUNTS, seed=2)


def test_every_noun_pattern_reads_both_ways():
    # each pattern has the noun slot on both sides, so no pair loses its word
    for spanish, english in NOUN_PATTERNS:
        assert ("{" in spanish) and ("{" in english)
