"""Word pairs from Apertium's compiled Spanish-English dictionary (models.lexicon)."""

from __future__ import annotations

import shutil

import pytest

from models.lexicon import BILINGUAL, dictionary_entries, paths, word_pairs

# Two entries sharing the tag arcs, a loop (a state reachable from itself) and a second
# transducer that must be ignored; lt-print's layout: arcs, final states, "--" between.
ATT = """0\t1\tg\tc\t0.000000\t
1\t2\ta\ta\t0.000000\t
2\t3\tt\tt\t0.000000\t
3\t4\to\tε\t0.000000\t
4\t5\t<n>\t<n>\t0.000000\t
5\t6\t<m>\tε\t0.000000\t
6\t0.000000
0\t7\tp\tf\t0.000000\t
7\t8\te\ti\t0.000000\t
8\t9\tz\tsh\t0.000000\t
9\t4\tε\tε\t0.000000\t
9\t9\tz\tz\t0.000000\t
--
0\t1\t1\t1\t0.000000\t
1\t1\t2\t2\t0.000000\t
1\t0.000000
"""


def test_every_path_of_the_first_transducer_is_one_entry():
    assert sorted(paths(ATT)) == [("gato<n><m>", "cat<n>"), ("pez<n><m>", "fish<n>")]


def test_only_letters_of_the_kept_kinds_are_kept():
    entries = [
        ("gato<n><m>", "cat<n>"),
        ("gato<n><m>", "cat<n>"),  # a duplicate
        ("punto# de partida<n><m>", "starting point<n>"),
        ("Madrid<np><loc>", "Madrid<np><loc>"),  # a proper noun
        ("ONU<n><acr><f>", "UN<n><acr>"),  # an acronym
        ("tres<num>", "three<num>"),
        ("mp3<n><m>", "mp3<n>"),  # not letters only
        ("traer<vblex>", "bring<vblex>"),
    ]
    assert word_pairs(entries) == [
        ("gato", "cat"),
        ("punto de partida", "starting point"),
        ("traer", "bring"),
    ]


@pytest.mark.skipif(
    shutil.which("lt-print") is None or not BILINGUAL.exists(),
    reason="needs apertium-eng-spa and lttoolbox-dev (./dev.sh installs them)",
)
def test_the_installed_dictionary_gives_everyday_words():
    pairs = {(e.spanish, e.english) for e in dictionary_entries()}
    assert len(pairs) > 15_000
    assert {("tenedor", "fork"), ("contraseña", "password"), ("traer", "bring")} <= pairs
