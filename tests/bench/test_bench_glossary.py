"""bench.glossary: its test set is chosen by rule from dictionary nouns found on both sides,
and a term counts as used as the glossary finds it."""

from __future__ import annotations

from bench.glossary import glossary_set, term_used
from models.lexicon import Entry

ENTRIES = [
    Entry("contraseña", "password", "n"),
    Entry("contraseña", "passphrase", "n"),
    Entry("servidor", "server", "n"),
    Entry("servidor de correo", "mail server", "n"),
    Entry("carpeta", "folder", "n"),
    Entry("abrir", "open", "vblex"),
    Entry("criterio", "criterion", "n"),
    Entry("ciudad", "city", "n"),
    Entry("sol", "sun", "n"),  # too short to be a term
]
PAIRS = [
    ("Introduzca la contraseña del servidor.", "Enter the server password."),
    ("El servidor de correo no responde", "The mail server does not answer"),
    ("Las Carpetas compartidas", "Shared folders"),
    ("Abrir el sol", "Open the sun"),
    ("La carpeta está vacía", "The directory is empty"),
    ("Los criterios de búsqueda", "The search criteria"),
    ("Dos ciudades", "Two cities"),
]


def test_each_pair_takes_its_longest_noun_whose_english_is_in_the_reference():
    chosen = glossary_set(PAIRS, ENTRIES, 10)
    terms = {source: (s, t) for source, _, s, t in chosen}
    assert terms == {
        "Introduzca la contraseña del servidor.": ("contraseña", "password"),
        "El servidor de correo no responde": ("servidor de correo", "mail server"),
        "Las Carpetas compartidas": ("carpeta", "folder"),
        # found in the reference in its English plural, not by Spanish rules ("criterions")
        "Los criterios de búsqueda": ("criterio", "criterion"),
        "Dos ciudades": ("ciudad", "city"),
    }
    # the same set whatever the input order, cut by its hash order
    assert glossary_set(PAIRS[::-1], ENTRIES, 10) == chosen
    assert glossary_set(PAIRS, ENTRIES, 2) == chosen[:2]


def test_a_term_is_used_in_any_case_and_in_the_plural():
    assert term_used("Open the Mail Servers now", "mail server")
    assert term_used("Folders", "folder")
    assert not term_used("the mailserver", "mail server")
    assert not term_used("Enfolder it", "folder")
    assert term_used("Two cities", "city") and not term_used("Two citys", "city")
    assert term_used("A folder in a folder", "folder") is True  # a share: once a text
