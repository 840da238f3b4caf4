"""Terminology: a request's glossary (source term -> target term) enforced in its translation.

A source term is found in a sentence case-insensitively, its accents composed or decomposed
(Unicode's NFC or NFD), at word boundaries, also in its plurals where the request's languages
have rules for them (plurals.PluralRules: from Spanish to English, "contraseña" finds
"Contraseñas", "canción" "canciones", "inicio de sesión" "inicios de sesión"; between other
languages a term is found as written). Each place found is a protected item of the kind
"term" (service.runtime.protect): a marker goes through the model, and the target term takes
its place, with the found form's capital first letter, and in its plural where the found
form was plural ("Contraseñas" with "contraseña" -> "passphrase" gives "Passphrases",
"ciudades" with "ciudad" -> "city" "cities"). A glossary may hold a plural as an entry of
its own ("índices" -> "indices" beside "índice" -> "index"; "mots de passe" -> "Passwörter"
beside "mot de passe" -> "Passwort"): a plural is longer than its singular, and longer terms
are found first. A term never cuts another protected item nor markup (an item wholly inside
it, the number of "artículo 5", is the term's). So a term found is always in the
translation, exactly as given; the response says which entries were applied.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from service.runtime.plurals import PluralRules

MAX_TERMS = 256  # glossary entries in one request
MAX_TERM_WORDS = 8  # words of one source or target term


_MARK = "\u0300-\u036f"  # combining accents: inside a word, though not `\w`


def _letters(word: str) -> str:
    """A word's pattern, each accented letter found composed or decomposed ("ñ" as one
    character or as "n" and U+0303): texts and terms come in either Unicode form."""
    parts = []
    for character in unicodedata.normalize("NFC", word):
        decomposed = unicodedata.normalize("NFD", character)
        escaped = re.escape(character)
        parts.append(
            escaped if decomposed == character else f"(?:{escaped}|{re.escape(decomposed)})"
        )
    return "".join(parts)


def _phrase(words: str) -> str:
    return r"\s+".join(_letters(w) for w in words.split())


def _compiled(singular: str, plurals: tuple[str, ...]) -> re.Pattern:
    """`singular` or one of its `plurals` (the group "plural") at word boundaries, in any
    case and Unicode form."""
    either = "|".join(_phrase(plural) for plural in plurals) or "(?!)"
    found = rf"(?:(?P<plural>{either})|{_phrase(singular)})"
    return re.compile(rf"(?<!\w){found}(?![\w{_MARK}])", re.IGNORECASE)


@lru_cache(maxsize=4096)  # bounded: the terms come from requests
def _pattern(source: str, rules: PluralRules) -> re.Pattern:
    """A source term as it is found: as given, or in one of the plurals of `rules` (each
    term compiled once, not once a sentence)."""
    source = unicodedata.normalize("NFC", source)
    return _compiled(source, rules.found(source))


@lru_cache(maxsize=4096)
def _target_pattern(target: str, rules: PluralRules) -> re.Pattern:
    """A target term as a translation may hold it: as given, or in its plural of `rules`."""
    plural = rules.written(target)
    return _compiled(target, (plural,) if plural != target else ())


def used(target: str, translation: str, rules: PluralRules) -> int:
    """How many times a translation holds a target term (any case, also in its plural of
    `rules`)."""
    return sum(1 for _ in _target_pattern(target, rules).finditer(translation))


@dataclass(frozen=True)
class Term:
    source: str
    target: str

    def pattern(self, rules: PluralRules) -> re.Pattern:
        return _pattern(self.source, rules)

    def rendered(self, found: re.Match, rules: PluralRules) -> str:
        """The target term in the form the source was found in (a match of `pattern`)."""
        target = rules.written(self.target) if found.group("plural") else self.target
        if found.group()[0].isupper() and target[0].islower():
            target = target[0].upper() + target[1:]
        return target


@dataclass(frozen=True)
class Found:
    start: int
    end: int
    text: str  # the target term as it replaces the found source
    entry: int  # its glossary entry


def find_terms(text: str, terms: tuple[Term, ...], rules: PluralRules) -> list[Found]:
    """Every place a term is found in `text` (also in its plurals of `rules`), longer terms
    first, none overlapping, in text order."""
    taken = [False] * len(text)
    found = []
    order = sorted(range(len(terms)), key=lambda i: -len(terms[i].source))
    for entry in order:
        term = terms[entry]
        for match in term.pattern(rules).finditer(text):
            if any(taken[match.start() : match.end()]):
                continue
            taken[match.start() : match.end()] = [True] * (match.end() - match.start())
            found.append(Found(match.start(), match.end(), term.rendered(match, rules), entry))
    return sorted(found, key=lambda f: f.start)


def checked(entries) -> tuple[tuple[Term, ...], list[str]]:
    """The terms of a request's glossary entries (messages with `source` and `target`) and
    the problems of the bad ones, each named."""
    terms, problems = [], []
    if len(entries) > MAX_TERMS:
        problems.append(f"glossary: {len(entries)} entries, at most {MAX_TERMS}")
    for i, entry in enumerate(entries):
        for side in ("source", "target"):
            value = getattr(entry, side)
            if not value.strip():
                problems.append(f"glossary[{i}].{side}: empty or only white space")
            elif len(value.split()) > MAX_TERM_WORDS:
                problems.append(
                    f"glossary[{i}].{side}: {len(value.split())} words, at most {MAX_TERM_WORDS}"
                )
        terms.append(Term(entry.source.strip(), entry.target.strip()))
    return tuple(terms), problems
