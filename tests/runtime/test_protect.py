"""What must not be translated: taken out of a sentence and put back exactly."""

from __future__ import annotations

import pytest

from bench.preservation import ITEMS, segments
from service.runtime.protect import mask


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("Visita https://ejemplo.com/página para más.", ["url"]),
        ("Escribe a ana.lopez@correo.es hoy.", ["email"]),
        ("El archivo %s tiene %1$d líneas, {name} y ${HOME} y $PATH.", ["placeholder"] * 5),
        ("Ejecuta `ls -la` ahora.", ["code"]),
        ("El 12/05/2024 a las 10:30 pagué 3,5 euros.", ["number"] * 3),
        ("👨\u200d👩\u200d👧 familia 🇪🇸 y ✔️ listo 😺", ["symbol"] * 4),
        ("Nada que guardar aquí.", []),
        ("El 50% de 1.000 y un 80 % es poco; sube un 60% cada año.", ["number"] * 4),
        ("Imprime %d, % d y %-5s.", ["placeholder"] * 3),
        ("Cuesta 20 € o 90 £ y mide 30 × 40 m, ≤ 70.", ["number", "symbol"] * 4 + ["number"]),
    ],
)
def test_items_are_found_and_replaced_by_markers(text, kinds):
    masked = mask(text)
    assert [i.kind for i in masked.items] == kinds
    for item in masked.items:
        assert item.text in text and item.text not in masked.text and item.marker in masked.text
    assert masked.restore(masked.text) == text  # the markers back in place: the text itself


def test_restoring_keeps_every_item_once_wherever_the_model_put_the_markers():
    masked = mask("Visita https://a.com y https://b.com.")
    assert masked.restore("Visit ZZ2 and ZZ1.") == "Visit https://b.com and https://a.com."
    lost = masked.restore("Visit ZZ1 and.")  # a marker lost: put back before the full stop
    assert lost == "Visit https://a.com and https://b.com." or lost.count("https://b.com") == 1
    twice = masked.restore("ZZ1 ZZ1 then ZZ2.")
    assert twice.count("https://a.com") == 1 and twice.count("https://b.com") == 1


def test_an_item_with_spaces_doubled_comes_back_exactly():
    """Doubled spaces were made one after the items were put back, inside them too: "`ls
    -la`" with two spaces, or a tag's attribute, came back changed."""
    masked = mask("Ejecuta `ls  -la` ahora.")
    assert masked.restore("Run  ZZ1 now.") == "Run `ls  -la` now."
    masked = mask('Hola <span title="a  b">amigo</span> mío.', markup=True)
    restored = masked.restore("Hello ZZ1 friend ZZ2  mine.")
    assert restored == 'Hello <span title="a  b">friend</span> mine.'


def test_a_word_like_the_marker_gets_a_longer_marker():
    masked = mask("El modelo ZZ1 tiene 5 piezas.")
    assert [i.marker for i in masked.items] == ["ZZZ1"]
    assert masked.restore("The ZZ1 model has ZZZ1 pieces.") == "The ZZ1 model has 5 pieces."


def test_a_word_of_the_source_like_a_broken_marker_stays_and_a_broken_marker_goes():
    """ "Z3" of the source ("un BMW Z3, de 1999") is a word the translation keeps wherever
    punctuation stands next to it; a marker the model broke ("Z1" for "ZZ1") is dropped and
    its item put back."""
    masked = mask("El BMW Z3, de 1999, es rápido.")
    assert masked.restore("The BMW Z3, from ZZ1, is fast.") == "The BMW Z3, from 1999, is fast."
    assert masked.restore("The BMW Z3 from Z1 is fast.") == "The BMW Z3 from is fast 1999."


def test_a_broken_marker_glued_to_a_word_goes_too():
    """The model glues a broken marker to a word ("TomZ1" for "Tom ZZ1", "ZeZ1" where a
    word was): it stayed in the translation beside its item put back."""
    masked = mask("Tom &amp; Jerry son amigos.", markup=True)
    assert masked.restore("TomZ1 Jerry are friends.") == "Tom Jerry are friends &amp;."
    masked = mask("¡Feliz cumpleaños 😺!")
    assert masked.restore("ZeZ1 birthdays ZZ1!") == "Ze birthdays 😺!"
    masked = mask("El BMWZ3 de 1999.")  # a word of the source stays
    assert masked.restore("The BMWZ3 of ZZ1.") == "The BMWZ3 of 1999."


def test_the_preservation_set_covers_every_kind():
    built = segments()
    assert len(built) >= 300
    used = {item for _, items in built for item in items}
    assert used == {item for items in ITEMS.values() for item in items}
    for text, items in built:  # every item of a segment is found as one item of its kind
        assert sorted(i.text for i in mask(text).items) == sorted(items), text


def test_a_growing_translation_gets_only_the_markers_it_holds():
    masked = mask("Lee `git pull` ahora 🚀.")
    assert masked.restore("Read", partial=True) == "Read"
    assert masked.restore("Read ZZ", partial=True) == "Read"  # in the middle of a marker
    assert masked.restore("Read Z", partial=True) == "Read"  # its first piece ("▁Z") alone
    assert masked.restore("Read ZZ1 now", partial=True) == "Read `git pull` now"
    assert masked.restore("Read ZZ1 now.") == "Read `git pull` now 🚀."  # the end: every item
