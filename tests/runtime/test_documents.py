"""Long texts cut into sentences and put back together around their translations."""

from __future__ import annotations

import pytest

from service.runtime.documents import pieces, split_text
from tests.helpers import growth

TEXT = (
    "  El Sr. García llegó a EE. UU. ayer. ¿Vienes?  ¡Claro!\n"
    "\n"
    "Segundo párrafo, una frase.\r\n"
    "\tTercera línea... y sigue. Fin.  "
)


def test_sentences_follow_the_lines_and_the_sentence_ends():
    document = split_text(TEXT)
    assert document.sentence_texts() == [
        "El Sr. García llegó a EE. UU. ayer.",  # abbreviations do not end a sentence
        "¿Vienes?",
        "¡Claro!",
        "Segundo párrafo, una frase.",
        "Tercera línea... y sigue.",
        "Fin.",
    ]
    assert [s.strip() for s in document.sentence_texts()] == document.sentence_texts()


def test_joining_keeps_every_character_between_the_sentences():
    document = split_text(TEXT)
    same, spans = document.join(document.sentence_texts())
    assert same == TEXT  # white space, blank lines, \r\n and the tab kept as they were
    assert [same[a:b] for a, b in spans] == document.sentence_texts()
    upper = [s.upper() + "!" for s in document.sentence_texts()]
    translated, spans = document.join(upper)
    assert [translated[a:b] for a, b in spans] == upper
    assert translated.startswith("  EL SR.") and "!\n\nSEGUNDO" in translated
    assert translated.endswith("FIN.!  ") and translated.count("\n") == TEXT.count("\n")


def test_a_prefix_of_the_translations_gives_the_text_so_far():
    document = split_text(TEXT)
    text, spans = document.join(["A.", "B?"])
    assert text == "  A. B?" and len(spans) == 2
    with pytest.raises(ValueError, match="7 translations of 6"):
        document.join(["x"] * 7)


LINES = [
    "El Sr. García llegó a EE. UU. ayer. ¿Vienes?  ¡Claro!",
    "Segundo párrafo, una frase.",
    "Tercera línea... y sigue. Fin.",
]


@pytest.mark.parametrize(("splitting", "expected"), [("lines", LINES), ("none", [TEXT.strip()])])
def test_coarser_splitting(splitting, expected):
    document = split_text(TEXT, splitting)
    assert document.sentence_texts() == expected
    assert document.join(document.sentence_texts())[0] == TEXT


def test_symbols_alone_are_one_sentence():
    assert split_text("😺 🚀").sentence_texts() == ["😺 🚀"]
    assert split_text(" \n ").sentences == ()


@pytest.mark.parametrize("space", ["\u00a0", "\u202f", "\u3000", "\u2028", "\x85"])
def test_a_wide_space_before_a_period_is_cut_as_any_space(space):
    """A capital, a white space beyond ASCII and a period ("J\u00a0.") made the segmenter
    panic (an exception past `Exception`: a server's 500): the sentences come back, each
    span indexing the text as sent."""
    text = f"Me llamo J{space}. García. Vivo en EE.{space}UU. ahora."
    document = split_text(text)
    assert document.sentence_texts() == [
        f"Me llamo J{space}. García.",
        f"Vivo en EE.{space}UU. ahora.",
    ]
    assert document.join(document.sentence_texts())[0] == text


def test_a_window_of_sentence_ends_alone_is_cut_at_once():
    """A window with no line break was searched for sentence ends from each of its places: a
    run of periods with no space after it took 4 s for 20,000 characters (a .txt uploaded
    to /translate_file is cut in windows of 20,000)."""

    def text(length: int) -> str:
        return "Hola. " + "." * length + "x fin."

    assert growth(lambda length: pieces(text(length), length * 2 // 3), 7_500, 30_000) < 8
    text = text(30_000)
    cut = pieces(text, 20_000)
    assert cut[0] == "Hola. " and "".join(cut) == text
