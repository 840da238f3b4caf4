"""Everyday sentence pairs from phrase patterns written here and the words of Apertium's
bilingual dictionary (models.lexicon).

The software catalogs say "Open the file", the Bible "And he said unto them"; neither asks
where the station is or says that the soup is cold. A pattern is one everyday sentence in
both languages with a slot: a noun ("¿Dónde está {el}?" / "Where is {the}?"), a verb
("Tengo que {v}." / "I have to {v}.") or an adjective ("{el} es {adj}." / "{the} is {adj}.").
The slots are filled with single dictionary words whose two lemmas are common (`common_words`:
each at least MIN_COUNT times), so the fillers are everyday words, not "phytosanitary". The
English lemma is counted in real English prose; the Spanish one in the catalogs' Spanish and
in the back-translation's Spanish (Apertium's Spanish for that real English), since software
strings seldom name a fork or a pillow: a Spanish word is common there when everyday English
calls for it. Spanish grammar is done by rule from
the dictionary's gender: the article (el / la, un / una; a + el = al, de + el = del), and
the adjective's agreement (-o / -a; adjectives in -e or a consonant keep their form). Feminine
nouns that begin with a stressed "a" take "el" in Spanish; not knowing the stress, those
beginning with a / ha are left out, as are nouns of both genders. English takes "a" or "an"
by the first letter (an exception list for "university", "hour" and the like).

Every filler is drawn by a seeded choice, PER_NOUN patterns per noun and so on, so the
build is reproducible; the result is deduplicated and the test parts' normalised texts are
removed by the caller like every other source.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable

from models.lexicon import Entry

MIN_COUNT = 5
PER_NOUN, PER_VERB, PER_ADJECTIVE = 8, 3, 2
SEED = 20261123

# (Spanish, English): {el} / {un} and {the} / {a} are the noun with its article; {N} and {n}
# the bare noun (Spanish, English); {adj} the adjective agreeing with the noun.
NOUN_PATTERNS = (
    ("¿Dónde está {el}?", "Where is {the}?"),
    ("Necesito {un}.", "I need {a}."),
    ("¿Tienes {un}?", "Do you have {a}?"),
    ("Quiero {un}, por favor.", "I want {a}, please."),
    ("Me gusta {el}.", "I like {the}."),
    ("No me gusta {el}.", "I don't like {the}."),
    ("¿Puedes darme {el}?", "Can you give me {the}?"),
    ("Busco {un}.", "I am looking for {a}."),
    ("Perdí {el}.", "I lost {the}."),
    ("{El} está aquí.", "{The} is here."),
    ("{El} está allí.", "{The} is over there."),
    ("¿Has visto {el}?", "Have you seen {the}?"),
    ("Voy a comprar {un}.", "I am going to buy {a}."),
    ("{El} no funciona.", "{The} does not work."),
    ("¿Puedo usar {el}?", "Can I use {the}?"),
    ("Olvidé {el} en casa.", "I forgot {the} at home."),
    ("¿Dónde puedo encontrar {un}?", "Where can I find {a}?"),
    ("Hay {un} en la mesa.", "There is {a} on the table."),
    ("Mi hermano tiene {un}.", "My brother has {a}."),
    ("Mi {N} {es} {adj}.", "My {n} is {adj}."),
    ("{El} {es} {adj}.", "{The} is {adj}."),
    ("{Este} {N} es {mio}.", "This {n} is mine."),
    ("Tu {N} está en la cocina.", "Your {n} is in the kitchen."),
    ("¿De quién es {el}?", "Whose {n} is this?"),
    ("Me gustaría ver {el}.", "I would like to see {the}."),
    ("Vamos a hablar de {el}.", "Let's talk about {the}."),
    ("¿Me puedes traer {un}?", "Can you bring me {a}?"),
    ("¿Me pasas {el}, por favor?", "Could you pass me {the}, please?"),
    ("Tráeme {el}, por favor.", "Bring me {the}, please."),
    ("¿Cuánto cuesta {el}?", "How much is {the}?"),
)
VERB_PATTERNS = (
    ("Quiero {v}.", "I want to {v}."),
    ("No puedo {v} ahora.", "I can't {v} now."),
    ("Tengo que {v} mañana.", "I have to {v} tomorrow."),
    ("Me gustaría {v}.", "I would like to {v}."),
    ("Necesitamos {v}.", "We need to {v}."),
    ("No quiero {v}.", "I don't want to {v}."),
    ("Es difícil {v}.", "It is hard to {v}."),
    ("¿Quieres {v} conmigo?", "Do you want to {v} with me?"),
    ("Vamos a {v} esta tarde.", "We are going to {v} this afternoon."),
    ("Mi hija aprende a {v}.", "My daughter is learning to {v}."),
)
ADJECTIVE_PATTERNS = (
    ("Es muy {adj}.", "It is very {adj}."),
    ("No es {adj}.", "It is not {adj}."),
    ("Es demasiado {adj}.", "It is too {adj}."),
    ("La casa es {adj_f}.", "The house is {adj}."),
    ("El coche es {adj}.", "The car is {adj}."),
    ("Parece {adj}.", "It looks {adj}."),
)
# Adjectives for the noun patterns' {adj}: (masculine, feminine, English, the verb: "es" for
# what a thing is, "está" for the state it is in)
COMMON_ADJECTIVES = (
    ("nuevo", "nueva", "new", "es"),
    ("viejo", "vieja", "old", "es"),
    ("grande", "grande", "big", "es"),
    ("pequeño", "pequeña", "small", "es"),
    ("caro", "cara", "expensive", "es"),
    ("barato", "barata", "cheap", "es"),
    ("bonito", "bonita", "pretty", "es"),
    ("limpio", "limpia", "clean", "está"),
    ("sucio", "sucia", "dirty", "está"),
    ("roto", "rota", "broken", "está"),
    ("rojo", "roja", "red", "es"),
    ("blanco", "blanca", "white", "es"),
    ("negro", "negra", "black", "es"),
    ("azul", "azul", "blue", "es"),
    ("verde", "verde", "green", "es"),
    ("bueno", "buena", "good", "es"),
    ("malo", "mala", "bad", "es"),
    ("lleno", "llena", "full", "está"),
    ("vacío", "vacía", "empty", "está"),
    ("abierto", "abierta", "open", "está"),
    ("cerrado", "cerrada", "closed", "está"),
)
_AN_EXCEPTIONS = ("uni", "use", "usu", "uten", "eu", "one", "once")
_AN_SILENT_H = ("hour", "honest", "honour", "honor", "heir")
_SPANISH_VERB = re.compile(r"^[a-záéíóúñü]+(ar|er|ir|ír)$")
_WORD = re.compile(r"[^\W\d_]+")
_PLURAL_ONLY = re.compile(r"[^éáó][aoe]s$")  # "vacaciones", "gafas": plural in form


def common_words(sentences: Iterable[str]) -> Counter:
    """How often each lower-case word occurs in `sentences`."""
    return Counter(word for s in sentences for word in _WORD.findall(s.lower()))


def english_indefinite(noun: str) -> str:
    lower = noun.lower()
    vowel = lower[:1] in "aeiou" and not lower.startswith(_AN_EXCEPTIONS)
    return ("an " if vowel or lower.startswith(_AN_SILENT_H) else "a ") + noun


def spanish_feminine(adjective: str) -> str:
    """The feminine of a masculine adjective lemma: -o to -a, -or/-ón/-án/-és add -a, others
    (-e, -l, -z, -ista...) keep their form."""
    if adjective.endswith("o"):
        return adjective[:-1] + "a"
    for ending, feminine in (("ón", "ona"), ("án", "ana"), ("és", "esa"), ("or", "ora")):
        if adjective.endswith(ending):
            return adjective[: -len(ending)] + feminine
    return adjective


def _contract(text: str) -> str:
    return re.sub(
        r"\b([Aa]|[Dd]e) el\b",
        lambda m: {"a": "al", "A": "Al"}.get(m.group(1), m.group(1)[0] + "el"),
        text,
    )


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _fill(pattern: tuple[str, str], spanish_slots: dict, english_slots: dict) -> tuple[str, str]:
    """The pattern with its slots filled; "{El}" / "{The}" are "{el}" / "{the}" capitalised."""
    texts = []
    for text, slots in zip(pattern, (spanish_slots, english_slots), strict=True):
        for key, value in slots.items():
            text = text.replace("{" + key + "}", value)
            text = text.replace("{" + _capital(key) + "}", _capital(value))
        texts.append(_capital(text))
    return _contract(texts[0]), texts[1]


def _is_common(entry: Entry, counts: Counter) -> bool:
    """Both lemmas are single words common in their language's real text."""
    return (
        " " not in entry.english
        and " " not in entry.spanish
        and counts[entry.english.lower()] >= MIN_COUNT
        and counts[entry.spanish.lower()] >= MIN_COUNT
    )


def phrase_pairs(entries: list[Entry], counts: Counter, seed: int = SEED) -> list[tuple[str, str]]:
    """The patterns filled with the common dictionary words of `entries` (models.lexicon),
    by a seeded choice; deduplicated."""
    rng = random.Random(seed)
    pairs = []
    nouns = [
        e
        for e in entries
        if e.kind == "n"
        and e.gender in ("m", "f")
        and e.spanish.islower()
        and _is_common(e, counts)
        and not (e.gender == "f" and e.spanish.startswith(("a", "á", "ha", "há")))
        and not _PLURAL_ONLY.search(e.spanish)
    ]
    for noun in nouns:
        masculine = noun.gender == "m"
        adjective = rng.choice(COMMON_ADJECTIVES)
        spanish_slots = {
            "el": ("el " if masculine else "la ") + noun.spanish,
            "un": ("un " if masculine else "una ") + noun.spanish,
            "N": noun.spanish,
            "adj": adjective[0] if masculine else adjective[1],
            "es": adjective[3],
            "este": "este" if masculine else "esta",
            "mio": "mío" if masculine else "mía",
        }
        english_slots = {
            "the": "the " + noun.english,
            "a": english_indefinite(noun.english),
            "n": noun.english,
            "adj": adjective[2],
        }
        for pattern in rng.sample(NOUN_PATTERNS, PER_NOUN):
            pairs.append(_fill(pattern, spanish_slots, english_slots))
    verbs = [
        e
        for e in entries
        if e.kind == "vblex" and _SPANISH_VERB.match(e.spanish) and _is_common(e, counts)
    ]
    for verb in verbs:
        for pattern in rng.sample(VERB_PATTERNS, PER_VERB):
            pairs.append(_fill(pattern, {"v": verb.spanish}, {"v": verb.english}))
    adjectives = [
        e for e in entries if e.kind == "adj" and e.spanish.islower() and _is_common(e, counts)
    ]
    for adjective in adjectives:
        spanish_slots = {"adj": adjective.spanish, "adj_f": spanish_feminine(adjective.spanish)}
        for pattern in rng.sample(ADJECTIVE_PATTERNS, PER_ADJECTIVE):
            pairs.append(_fill(pattern, spanish_slots, {"adj": adjective.english}))
    return list(dict.fromkeys(pairs))
