"""A request's glossary (service.runtime.glossary): terms found case- and plural-tolerantly,
never inside another protected item, and always in the translation as given."""

from __future__ import annotations

from types import SimpleNamespace

from service.runtime.glossary import Term, checked, find_terms
from service.runtime.protect import mask

TERMS = (
    Term("contraseña", "passphrase"),
    Term("inicio de sesión", "sign-in"),
    Term("inicio", "home"),
)


def test_terms_are_found_in_any_case_and_plural_longest_first():
    text = "Contraseñas, INICIO DE SESIÓN y la página de inicio."
    found = find_terms(text, TERMS)
    assert [(text[f.start : f.end], f.text, f.entry) for f in found] == [
        ("Contraseñas", "Passphrases", 0),
        ("INICIO DE SESIÓN", "Sign-in", 1),
        ("inicio", "home", 2),
    ]
    assert find_terms("iniciones y reinicio", TERMS) == []  # whole words only


def test_a_found_term_is_in_the_translation_whatever_the_model_does_with_it():
    masked = mask("Cambia tu contraseña en https://x.es/contraseña", terms=TERMS)
    assert [i.kind for i in masked.items] == ["term", "url"]  # not inside the URL
    assert (
        masked.restore("Change your ZZ1 at ZZ2")
        == "Change your passphrase at https://x.es/contraseña"
    )
    lost = masked.restore("Change your password at ZZ2")
    assert "passphrase" in lost and "https://x.es/contraseña" in lost


def test_bad_entries_are_named():
    entries = [
        SimpleNamespace(source=" ", target="x"),
        SimpleNamespace(source="a", target="b " * 9),
    ]
    terms, problems = checked(entries)
    assert problems == [
        "glossary[0].source: empty or only white space",
        "glossary[1].target: 9 words, at most 8",
    ]
    assert terms[1] == Term("a", "b b b b b b b b b")
