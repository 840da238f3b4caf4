"""Back-translated pairs: sentences of fortune files and WordNet data written here, Spanish by
Apertium."""

from __future__ import annotations

import shutil

import pytest

from models.backtranslation import (
    ding_sentences,
    fortune_sentences,
    leaves_english,
    synthetic_pairs,
    unmarked,
    wordnet_examples,
)

FORTUNES = """Where is the train station? It is near the old bridge.
%
A closed mouth gathers no foot.
		-- Proverb
%
Ok.
%
#include <stdio.h> int main(void) { return 0; }
%
Where is the train station? It is near the old bridge.
"""


def test_fortunes_become_plain_sentences(tmp_path):
    directory = tmp_path / "usr" / "share" / "games" / "fortunes"
    directory.mkdir(parents=True)
    (directory / "misc").write_text(FORTUNES, encoding="latin-1")
    (directory / "misc.dat").write_bytes(b"\x00\x01")  # the index beside it is not text
    assert fortune_sentences(tmp_path) == [
        "Where is the train station?",
        "It is near the old bridge.",
        "A closed mouth gathers no foot.",
    ]  # no attribution, too short, code, or repeat


WORDNET = """  1 This software and database is being provided to you, the LICENSEE, by
00001740 03 n 01 bread 0 000 | food made from dough; "the bread crusted in the oven"; "bread"
00001741 29 v 01 wait 0 000 | stay;  "We waited  for the bus"; "wait here"; "C++ <code>"
00001742 00 s 01 grey 0 000 | of a dull colour; "the bread crusted in the oven"
"""


def test_wordnet_examples_are_the_quoted_usage_examples(tmp_path):
    directory = tmp_path / "usr" / "share" / "wordnet"
    directory.mkdir(parents=True)
    (directory / "data.noun").write_text(WORDNET, encoding="latin-1")
    assert wordnet_examples(tmp_path) == [
        "the bread crusted in the oven",
        "We waited for the bus",
        "wait here",
    ]  # not the licence header, a one-word example, markup, or a repeat


DING = """# Version :: 1.9 2022-01-01
Guten Morgen! :: Good morning!
Wo ist der Bahnhof? | Wie weit ist es? :: Where is the train station? | How far is it?
Er hat sich gut/schlecht benommen. :: He behaved well/badly.
Sie ist Ärztin (von Beruf). :: She is a doctor (by profession).
Ich bin müde; Ich bin erschöpft. :: I’m tired out.; I am exhausted.
Haus {n} :: house
Guten Morgen! :: Good morning!
"""


def test_ding_gives_its_plain_english_sentences(tmp_path):
    directory = tmp_path / "usr" / "share" / "trans"
    directory.mkdir(parents=True)
    (directory / "de-en").write_text(DING, encoding="utf-8")
    assert ding_sentences(tmp_path) == [
        "Where is the train station?",
        "How far is it?",
        "I'm tired out.",
        "I am exhausted.",
    ]  # not the header, two words, alternatives, notes, a bare word, or a repeat


@pytest.mark.skipif(shutil.which("apertium") is None, reason="apertium")
def test_apertium_gives_the_spanish_source_of_real_english():
    english = ["Where is the train station?", "I am from Canada.", "I like cats."]
    pairs = synthetic_pairs(english)
    assert [e for _, e in pairs] == english  # the English side is the real one
    assert "Canadá" in pairs[1][0] and "gatos" in pairs[2][0].lower()


def test_a_source_with_an_english_word_left_in_it_is_not_kept():
    # Apertium's marks: *unknown, @not in the bilingual dictionary, #not generated
    assert leaves_english("Un circo *foreman hacía las rondas")
    assert leaves_english("la bien-*knownness de él") and leaves_english("el @office")
    assert not leaves_english("Soy de *Bob, un #carácter")  # a name is copied rightly
    assert not leaves_english("5 *3 = 15") and not leaves_english("correo a@b.es")
    assert unmarked("Soy de *Bob, un #carácter ~de") == "Soy de Bob, un carácter de"
    assert unmarked("5 * 3 y a@b.es") == "5 * 3 y a@b.es"  # not marks: text


@pytest.mark.skipif(shutil.which("apertium") is None, reason="apertium")
def test_back_translation_drops_what_apertium_left_in_english():
    english = ["The knob is loose.", "I like cats.", "Bob is my friend."]
    pairs = synthetic_pairs(english)
    assert [e for _, e in pairs] == ["I like cats.", "Bob is my friend."]
    assert all(mark not in s for s, _ in pairs for mark in "*@#")
