"""A request's glossary (service.runtime.glossary): terms found case- and plural-tolerantly,
never inside another protected item, and always in the translation as given."""

from __future__ import annotations

import unicodedata
from dataclasses import replace
from types import SimpleNamespace

import pytest

from service.runtime.glossary import Term, checked, find_terms
from service.runtime.plurals import NO_RULES, PluralRules, english_plural, spanish_plurals
from service.runtime.protect import mask

SPANISH_ENGLISH = PluralRules.of("es", "en")

TERMS = (
    Term("contraseña", "passphrase"),
    Term("inicio de sesión", "sign-in"),
    Term("inicio", "home"),
)


def test_terms_are_found_in_any_case_and_plural_longest_first():
    text = "Contraseñas, INICIO DE SESIÓN y la página de inicio."
    found = find_terms(text, TERMS, SPANISH_ENGLISH)
    assert [(text[f.start : f.end], f.text, f.entry) for f in found] == [
        ("Contraseñas", "Passphrases", 0),
        ("INICIO DE SESIÓN", "Sign-in", 1),
        ("inicio", "home", 2),
    ]
    assert find_terms("iniciones y reinicio", TERMS, SPANISH_ENGLISH) == []  # whole words only


def test_a_found_term_is_in_the_translation_whatever_the_model_does_with_it():
    masked = mask("Cambia tu contraseña en https://x.es/contraseña", terms=TERMS)
    assert [i.kind for i in masked.items] == ["term", "url"]  # not inside the URL
    assert (
        masked.restore("Change your ZZ1 at ZZ2")
        == "Change your passphrase at https://x.es/contraseña"
    )
    lost = masked.restore("Change your password at ZZ2")
    assert "passphrase" in lost and "https://x.es/contraseña" in lost


def test_a_term_holding_a_number_is_applied_and_a_term_never_cuts_an_item():
    """A number inside a term ("artículo 5") kept the term from ever being found: the entry
    was silently not applied. Items wholly inside a term are the term's; one the term would
    cut (a URL, an e-mail address) or markup still keeps it out."""
    terms = (Term("artículo 5", "Section 5"), Term("COVID-19", "COVID-19"), Term("x.es", "X"))
    masked = mask("Según el artículo 5 y la COVID-19, escribe a ana@x.es o a 5.", terms=terms)
    assert [(i.kind, i.text, i.entry) for i in masked.items] == [
        ("term", "Section 5", 0),
        ("term", "COVID-19", 1),
        ("email", "ana@x.es", -1),
        ("number", "5", -1),
    ]
    assert masked.restore("According to ZZ1 and ZZ2, write to ZZ3 or to ZZ4.") == (
        "According to Section 5 and COVID-19, write to ana@x.es or to 5."
    )
    marked = mask("El I&amp;D 5.", True, (Term("I&amp;D 5", "R&amp;D 5"),))
    assert [i.kind for i in marked.items] == ["entity", "number"]  # markup stays as it is


def test_a_term_found_twice_is_used_only_where_its_target_is_there_twice():
    """A sentence "Mi casa es tu casa." with casa -> home took the model's own "My house is
    your home." as using the term: one "home" answered for both."""
    masked = mask("Mi casa es tu casa.", terms=(Term("casa", "home"),))
    assert [i.kind for i in masked.items] == ["term", "term"]
    assert not masked.terms_used("My house is your home.")
    assert masked.terms_used("My home is your home.")
    assert mask("Casa y casa.", terms=(Term("casa", "home"),)).terms_used("Home and home.")


def test_a_target_in_markup_is_written_as_the_markups_text():
    """A target put raw into HTML ("R&D", "<key>") broke the markup, and the model's own
    translation, escaped, never counted as using it."""
    masked = mask("Pulsa <b>Intro</b> en la consola.", True, (Term("consola", "R&D <console>"),))
    (term,) = [i for i in masked.items if i.kind == "term"]
    assert term.text == "R&amp;D &lt;console&gt;"
    restored = masked.restore(masked.text.replace("Pulsa", "Press").replace("en la", "in the"))
    assert restored.endswith("in the R&amp;D &lt;console&gt;.") and "<b>" in restored
    assert masked.terms_used("Press <b>Enter</b> in the R&amp;D &lt;console&gt;.")
    assert mask("la consola", terms=(Term("consola", "R&D"),)).items[0].text == "R&D"


def test_terms_are_found_in_either_unicode_form():
    """A text or a term written decomposed ("n" and U+0303 for "ñ", as macOS writes file
    names) found nothing: the glossary went unapplied though the model read the same words."""
    decomposed = unicodedata.normalize("NFD", "Cambia tu contraseña y el café.")
    terms = (Term("contraseña", "passphrase"), Term("cafe", "tea"))
    found = find_terms(decomposed, terms, SPANISH_ENGLISH)
    assert [(decomposed[f.start : f.end], f.text) for f in found] == [
        (unicodedata.normalize("NFD", "contraseña"), "passphrase")
    ]  # "cafe" is not the start of "café"
    source = unicodedata.normalize("NFD", "contraseña")
    (found,) = find_terms("Dos contraseñas.", (Term(source, "passphrase"),), SPANISH_ENGLISH)
    assert found.text == "passphrases"


PLURALS = (
    Term("canción", "song"),
    Term("luz", "light"),
    Term("examen", "exam"),
    Term("papel", "paper"),
    Term("país", "country"),
    Term("caja", "box"),
    Term("ciudad", "city"),
    Term("clase", "class"),
    Term("autobús", "bus"),
    Term("carácter", "character"),
    Term("cuenta de usuario", "user account"),
    Term("inicio de sesión", "sign-in"),
    Term("inicio", "home"),
    Term("ratón", "mouse"),
    Term("índice", "index"),
    Term("índices", "indices"),  # its own plural, a longer term: found first
    Term("crisis", "crisis"),
)


def test_a_term_is_found_in_its_spanish_plural_and_written_in_its_english_one():
    """A plural was the last word with -s or -es: "canciones", "luces", "exámenes" went
    unfound, "inicios de sesión" too (the shorter "inicio" took it: "homes de sesión"); and
    the target took a plain -s, one word only: "boxs", "citys", "user account"."""
    text = (
        "Canciones, luces, exámenes, papeles, países, cajas, ciudades, clases, autobuses, "
        "caracteres, cuentas de usuario, inicios de sesión, ratones, índices e índice."
    )
    found = find_terms(text, PLURALS, SPANISH_ENGLISH)
    assert [(text[f.start : f.end], f.text) for f in found] == [
        ("Canciones", "Songs"),
        ("luces", "lights"),
        ("exámenes", "exams"),
        ("papeles", "papers"),
        ("países", "countries"),
        ("cajas", "boxes"),
        ("ciudades", "cities"),
        ("clases", "classes"),
        ("autobuses", "buses"),
        ("caracteres", "characters"),
        ("cuentas de usuario", "user accounts"),
        ("inicios de sesión", "sign-ins"),
        ("ratones", "mice"),
        ("índices", "indices"),
        ("índice", "index"),
    ]
    text = "Las crisis, el inicio, reinicios y cancioneses."
    found = find_terms(text, PLURALS, SPANISH_ENGLISH)  # its own plural; never inside a word
    assert [(text[f.start : f.end], f.text) for f in found] == [
        ("crisis", "crisis"),
        ("inicio", "home"),
    ]
    masked = mask("Dos ciudades y tres cajas.", terms=PLURALS, rules=SPANISH_ENGLISH)
    assert masked.terms_used("Two cities and three boxes.")  # as the markers write them


@pytest.mark.parametrize(
    ("singular", "plural"),
    [
        ("canción", "canciones"),
        ("examen", "exámenes"),
        ("joven", "jóvenes"),
        ("luz", "luces"),
        ("raíz", "raíces"),
        ("país", "países"),
        ("inglés", "ingleses"),
        ("mes", "meses"),
        ("rubí", "rubíes"),
        ("menú", "menús"),
        ("régimen", "regímenes"),
        ("club", "clubs"),
        ("disco duro", "discos duros"),
        ("palabra clave", "palabras clave"),
        ("base de datos", "bases de datos"),
    ],
)
def test_spanish_plurals_follow_the_academy_s_rules(singular, plural):
    assert plural in spanish_plurals(singular)
    assert plural.capitalize() in spanish_plurals(singular.capitalize())


def test_a_spanish_word_that_is_its_own_plural_has_no_other():
    assert spanish_plurals("lunes") == spanish_plurals("análisis") == spanish_plurals("tórax") == ()
    assert spanish_plurals("5 de mayo") == ()


@pytest.mark.parametrize(
    ("singular", "plural"),
    [
        ("passphrase", "passphrases"),
        ("box", "boxes"),
        ("match", "matches"),
        ("crash", "crashes"),
        ("quiz", "quizzes"),
        ("class", "classes"),
        ("status", "statuses"),
        ("analysis", "analyses"),
        ("city", "cities"),
        ("key", "keys"),
        ("mouse", "mice"),
        ("Person", "People"),
        ("API", "APIs"),
        ("DNS", "DNS"),
        ("settings", "settings"),
        ("software", "software"),
        ("sign-in", "sign-ins"),
        ("user account", "user accounts"),
        ("point of sale", "points of sale"),
        ("Section 5", "Sections 5"),
    ],
)
def test_english_plurals_are_written_by_the_rules(singular, plural):
    assert english_plural(singular) == plural


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


def test_a_sentence_with_terms_goes_without_them_too_and_its_own_translation_wins_if_it_uses_them():
    from service.runtime.documents import split_text
    from service.runtime.tokenizer import Tokenizer
    from service.runtime.translation import Sources, with_alternatives

    sentences = ["Cambia tu contraseña en https://x.es", "Hola", "Dos contraseñas"]
    masked, alternatives = with_alternatives(
        [mask(s, terms=TERMS, rules=SPANISH_ENGLISH) for s in sentences]
    )
    assert alternatives == {0: 3, 2: 4}
    assert masked[3].text == mask(sentences[0]).text and "contraseña" in masked[3].text
    assert masked[1].plain is None and [i.kind for i in masked[3].items] == ["url"]
    assert masked[0].terms_used("Change your passphrase") and not masked[0].terms_used("pass")
    assert masked[2].terms_used("Two passphrases") and not masked[2].terms_used("passphrase")

    class Words(Tokenizer):  # a hypothesis' tokens are indices into a word list
        def __init__(self, words):
            self.words = words

        def decode(self, ids):
            return " ".join(self.words[i] for i in ids)

    words = Words(["Change", "your", "passphrase", "password"])
    documents = [split_text(s, "none") for s in sentences]
    sources = Sources([[1]] * 5, documents, masked, False, alternatives)

    def nbest(ids):
        return [SimpleNamespace(tokens=ids)]

    own_uses = [nbest([0, 1]), nbest([0]), nbest([0]), nbest([0, 1, 2]), nbest([0])]
    assert sources.chosen(words, own_uses) == [3, 1, 2]  # "passphrase" was its own word
    own_misses = [nbest([0, 1]), nbest([0]), nbest([0]), nbest([0, 1, 3]), nbest([0])]
    assert sources.chosen(words, own_misses) == [0, 1, 2]  # "password": the markers' one
    assert sources.chosen(words, own_uses[:2]) == [0, 1]  # a stream's first sentences


@pytest.mark.parametrize(
    ("source", "target"),
    [("spa_Latn", "eng_Latn"), ("es_XX", "en_XX"), ("spa", "eng"), ("__es__", "__en__"),
     ("ES", "en-GB")],
)  # fmt: skip
def test_a_model_s_own_codes_name_the_languages_of_the_plural_rules(source, target):
    assert PluralRules.of(source, target) == SPANISH_ENGLISH
    assert SPANISH_ENGLISH.found("clase") == ("clases",)
    assert SPANISH_ENGLISH.written("class") == "classes"
    others = PluralRules.of("fra_Latn", "deu_Latn")
    assert others == PluralRules("fr", "de") and others.found("classe") == ()
    assert others.written("Klasse") == "Klasse"
    assert PluralRules.of("", "") == NO_RULES


def test_plurals_are_found_and_written_only_by_the_rules_of_the_request_s_languages():
    """A French-German request found "mots de passe" by Spanish rules and wrote the German
    target in an English plural ("Passworts"): a term of a language without rules is found
    and written as given, and a plural is found only where the target's can be written."""
    french = (Term("mot de passe", "Passwort"),)
    text = "Le mot de passe et les mots de passe."
    for languages in (("fr", "de"), ("fra_Latn", "eng_Latn"), ("es", "de"), ("", "")):
        found = find_terms(text, french, PluralRules.of(*languages))
        as_written = [(text[f.start : f.end], f.text) for f in found]
        assert as_written == [("mot de passe", "Passwort")], languages
    spanish = (Term("contraseña", "Passwort"),)
    text = "La contraseña y las contraseñas."
    assert [f.text for f in find_terms(text, spanish, PluralRules.of("es", "de"))] == ["Passwort"]
    assert [f.text for f in find_terms(text, spanish, SPANISH_ENGLISH)] == [
        "Passwort",
        "Passworts",
    ]
    # a model's own translation counts a target in its own language's plural alone
    german = mask("La contraseña.", terms=spanish, rules=PluralRules.of("es", "de"))
    assert german.terms_used("Das Passwort.") and not german.terms_used("Die Passworts.")
    english = mask("La contraseña.", terms=spanish, rules=SPANISH_ENGLISH)
    assert english.terms_used("The Passworts.")


def _served(version, source: str, target: str, text: str, term: Term):
    """The text of a request's translation whose model writes each sentence's masked text
    back as it is, and the glossary entries it applied."""
    import asyncio

    from service.front.config import ServerConfig
    from service.runtime.decoding import DecodingOptions, Hypothesis
    from service.runtime.requests import TranslateRequest
    from service.runtime.translation import TranslationModel

    model = TranslationModel(version, ServerConfig())
    request = TranslateRequest(
        texts=(text,), fields=("texts[0]",), options=DecodingOptions(), glossary=(term,),
        source_language=source, target_language=target,
    )  # fmt: skip
    prepared = asyncio.run(model.prepare(request))
    echoed = [
        [Hypothesis(model.tokenizer.encode_target(m.text), 0.0, 0.0, finished=True)]
        for m in prepared.sources.masked
    ]
    (translation,) = model.response(prepared, echoed).translations
    return translation.hypotheses[0].text, translation.glossary_applied


def test_a_request_s_glossary_takes_the_plurals_of_its_languages(exported_translator):
    """Through a translator's request: French to German finds the term as written and never
    writes "Passworts"; Spanish to English, named or left to the model's own pair, finds the
    plural and writes it in English."""
    version = exported_translator[0]
    declared = {"source": ["es", "fr"], "target": ["en", "de"]}
    both = replace(version, manifest={**version.manifest, "languages": declared})
    term = Term("mot de passe", "Passwort")
    assert _served(both, "fr", "de", "Le mot de passe et les mots de passe.", term) == (
        "Le Passwort et les mots de passe.",
        (0,),
    )
    term = Term("contraseña", "passphrase")
    text = "La contraseña y las contraseñas."
    assert _served(both, "es", "en", text, term)[0] == "La passphrase y las passphrases."
    assert _served(version, "", "", text, term)[0] == "La passphrase y las passphrases."
