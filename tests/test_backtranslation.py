"""Back-translated pairs: sentences of fortune files written here, Spanish by Apertium."""

from __future__ import annotations

import shutil

import pytest

from models.backtranslation import fortune_sentences, synthetic_pairs

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


@pytest.mark.skipif(shutil.which("apertium") is None, reason="apertium")
def test_apertium_gives_the_spanish_source_of_real_english():
    english = ["Where is the train station?", "I am from Canada.", "I like cats."]
    pairs = synthetic_pairs(english)
    assert [e for _, e in pairs] == english  # the English side is the real one
    assert "Canadá" in pairs[1][0] and "gatos" in pairs[2][0].lower()
