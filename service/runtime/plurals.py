"""Plurals of glossary terms: the Spanish plurals a source term is found in, the English
plural its target is written in.

Spanish (the Real Academia's rules): a term's head, its words before a preposition
("inicio de sesión" -> "inicios de sesión"), takes the plural, every word of it ("disco
duro" -> "discos duros") or the first alone ("palabra clave" -> "palabras clave"). A word
ending in an unstressed vowel takes -s; in a consonant, -es, a written accent on the last
syllable going ("canción" -> "canciones") and one coming to a word ending in -n stressed
before it ("examen" -> "exámenes"); -z becomes -ces ("luz" -> "luces"); a word of two or
more syllables ending in an unstressed -s or -x is its own plural ("la crisis", "las
crisis"). English: the last word, or the one before "of" ("point of sale" -> "points of
sale"), takes -s, -es after s, x, z, ch and sh, -ies for a consonant's -y, or its irregular
plural; a word that has none ("software") or is already plural ("settings") stays.

Which rules a request's glossary follows is its languages' (PluralRules): Spanish plurals
are looked for only in a Spanish source, and only where the target has a plural to write
(English's); a term of any other language is found and written as given."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from service.runtime import languages

# where a Spanish term's head ends: the words from a preposition on stay singular
SPANISH_LINKS = {
    "a", "al", "ante", "bajo", "con", "contra", "de", "del", "desde", "en", "entre", "hacia",
    "hasta", "para", "por", "según", "sin", "sobre", "tras",
}  # fmt: skip
# the plurals whose stress moves off the syllable that bears it
SPANISH_IRREGULAR = {"carácter": "caracteres", "régimen": "regímenes", "espécimen": "especímenes"}
_STRONG, _WEAK = "aeoáéó", "iuüíú"
_ACCENTED = str.maketrans("aeiou", "áéíóú")
_PLAIN = str.maketrans("áéíóú", "aeiou")

ENGLISH_LINKS = {"of", "in", "on", "for", "to", "with", "from", "by", "at"}
ENGLISH_IRREGULAR = {
    "child": "children", "criterion": "criteria", "echo": "echoes",
    "foot": "feet", "goose": "geese", "half": "halves", "hero": "heroes", "knife": "knives",
    "leaf": "leaves", "life": "lives", "man": "men", "mouse": "mice", "person": "people",
    "phenomenon": "phenomena", "potato": "potatoes", "quiz": "quizzes", "shelf": "shelves",
    "thief": "thieves", "tomato": "tomatoes", "tooth": "teeth", "wife": "wives",
    "wolf": "wolves", "woman": "women",
}  # fmt: skip
# nouns English does not count: their plural is themselves
ENGLISH_UNCOUNTED = {
    "advice", "data", "equipment", "feedback", "firmware", "hardware", "information",
    "knowledge", "malware", "metadata", "middleware", "news", "research", "software", "spam",
}  # fmt: skip


def spanish_plurals(term: str) -> tuple[str, ...]:
    """The plural forms of a Spanish term, longest first (none where its head is its own
    plural, "la crisis", or where it has no head, "5 de mayo")."""
    words = term.split()
    head = next((i for i, w in enumerate(words) if w.lower() in SPANISH_LINKS), len(words))
    if not head:
        return ()
    each = [_spanish_word_plurals(w) or [w] for w in words[:head]]
    forms = set()
    for first in each[0]:
        forms.add(" ".join([first, *words[1:head], *words[head:]]))
        forms.add(" ".join([first, *(plurals[0] for plurals in each[1:]), *words[head:]]))
    forms.discard(" ".join(words))
    return tuple(sorted(forms, key=lambda f: (-len(f), f)))


def _spanish_word_plurals(word: str) -> list[str]:
    """A Spanish word's plurals, the rules' first, then the -s loans take ("clubs",
    "emails"); none where it is its own ("lunes", "tórax") or ends in no letter ("5")."""
    lower = word.lower()
    if lower in SPANISH_IRREGULAR:
        return [_cased(word, SPANISH_IRREGULAR[lower])]
    if not word[-1:].isalpha():
        return []
    if len(word) > 1 and word.isupper():  # an acronym: "los PDF", or "los PDFs"
        return [word + "s"]
    nuclei = _nuclei(lower)
    last = lower[-1]
    if last in "aeiouáéó":
        return [word + "s"]
    if last in "íú":  # "rubíes", "rubís"
        return [word + "es", word + "s"]
    if last == "z":  # an accent stays: "raíz" -> "raíces"
        return [word[:-1] + _cased(word[-1], "c") + "es"]
    stressed = bool(nuclei) and any(c in "áéíóú" for c in lower[slice(*nuclei[-1])])
    if last in "sx" and len(nuclei) > 1 and not stressed:
        return []
    if stressed:  # "canción" -> "canciones", but "país" -> "países"
        plural = _unaccented(word, nuclei[-1]) + "es"
    elif last == "n" and len(nuclei) > 1:  # "examen" -> "exámenes"
        plural = _accented(word, nuclei[-2]) + "es"
    else:
        plural = word + "es"
    loan = [] if last in "sx" else [word + "s"]
    return list(dict.fromkeys([plural, word + "es", *loan]))


def _nuclei(word: str) -> list[tuple[int, int]]:
    """The (start, end) of each syllable's vowels in a lower-case Spanish word: a weak vowel
    beside another vowel shares its syllable ("cion"), unless accented ("pa-ís"); two strong
    vowels part ("le-er"); the u of "que", "qui", "gue", "gui" is no vowel."""
    nuclei: list[tuple[int, int]] = []
    previous = None  # the vowel just before, if the last character was one
    for i, c in enumerate(word):
        silent = c == "u" and i > 0 and word[i - 1] in "qg" and word[i + 1 : i + 2] in "eiéí"
        if c not in _STRONG + _WEAK or silent:
            previous = None
            continue
        joined = previous is not None and not (
            (previous in _STRONG and c in _STRONG) or "í" in previous + c or "ú" in previous + c
        )
        if joined:
            nuclei[-1] = (nuclei[-1][0], i + 1)
        else:
            nuclei.append((i, i + 1))
        previous = c
    return nuclei


def _unaccented(word: str, nucleus: tuple[int, int]) -> str:
    """`word` without the written accent of the syllable `nucleus`, unless the accent parts
    two vowels ("país", "baúl": the plural keeps it)."""
    start, end = nucleus
    beside = (word[start - 1 : start] + word[end : end + 1]).lower()
    if end - start == 1 and word[start].lower() in "íú" and set(beside) & set(_STRONG + _WEAK):
        return word
    return word[:start] + word[start:end].translate(_PLAIN) + word[end:]


def _accented(word: str, nucleus: tuple[int, int]) -> str:
    """`word` with a written accent on the syllable `nucleus`: on its strong vowel, or on the
    second of two weak ones."""
    start, end = nucleus
    vowels = word[start:end]
    at = next((i for i, c in enumerate(vowels) if c.lower() in _STRONG), len(vowels) - 1)
    return word[: start + at] + word[start + at].translate(_ACCENTED) + word[start + at + 1 :]


def _cased(model: str, word: str) -> str:
    """`word` (lower-case) in the case of `model`: upper, capitalised or lower."""
    if model.isupper():
        return word.upper()
    return word[:1].upper() + word[1:] if model[:1].isupper() else word


def english_plural(term: str) -> str:
    """The plural of an English term: its last word's, or that of the word before a
    preposition followed by more ("point of sale" -> "points of sale"); the term itself
    where that word has no plural or is one."""
    parts = re.split(r"(\s+)", term)  # words at even places, the white space between kept
    words = parts[::2]
    at = next(
        (i - 1 for i in range(1, len(words) - 1) if words[i].lower() in ENGLISH_LINKS),
        len(words) - 1,
    )
    while at >= 0 and not words[at][-1:].isalpha():  # "Section 5" -> "Sections 5"
        at -= 1
    if at >= 0:
        parts[2 * at] = _english_word_plural(words[at])
    return "".join(parts)


def _english_word_plural(word: str) -> str:
    head, _, last = word.rpartition("-")  # "sign-in" -> "sign-ins"
    lower = last.lower()
    if lower in ENGLISH_UNCOUNTED:
        plural = last
    elif lower in ENGLISH_IRREGULAR:
        plural = _cased(last, ENGLISH_IRREGULAR[lower])
    elif len(last) > 1 and last.isupper():  # an acronym: "APIs", but "DNS"
        plural = last if last.endswith("S") else last + "s"
    elif re.search(r"(ss|us|as|x|z|ch|sh)$", lower):
        plural = last + "es"
    elif lower.endswith("is"):  # "analysis" -> "analyses"
        plural = last[:-2] + "es"
    elif lower.endswith("s"):  # already plural, or its own: "settings", "series"
        plural = last
    elif re.search(r"[^aeiou]y$", lower):
        plural = last[:-1] + "ies"
    else:
        plural = last + "s"
    return f"{head}-{plural}" if head else plural


# the plural forms a term is also found in, by its language (as the edge names it)
FOUND: dict[str, Callable[[str], tuple[str, ...]]] = {"es": spanish_plurals}
# the plural a term is written in, by its language
WRITTEN: dict[str, Callable[[str], str]] = {"en": english_plural}


@functools.lru_cache(maxsize=1024)  # every request asks it of its languages' codes
def rules_language(code: str) -> str:
    """The language of the rules a request's code names (`es` for `spa_Latn`, `es_XX`,
    `spa`, M2M100's token `__es__`, `ES` or `es-MX`); the code, compared, for one without
    rules; "" for none."""
    code = code.strip().strip("_")
    return languages.given_code(languages.edge_code(code), [*FOUND, *WRITTEN]) if code else ""


@dataclass(frozen=True)
class PluralRules:
    """The plurals of a glossary's terms between a request's `source` and `target` languages
    (rules_language). A source term is also found in its plurals only where both languages
    have rules: a plural found is written as the target's plural, and a target language
    without rules has no plural to write, so its source's plural is left to the model rather
    than written in the singular. A target term is also counted in its own language's
    plural. Empty: no rules, every term found and written as given."""

    source: str = ""
    target: str = ""

    @classmethod
    def of(cls, source: str, target: str) -> PluralRules:
        return cls(rules_language(source), rules_language(target))

    def found(self, term: str) -> tuple[str, ...]:
        """The plurals a source term is also found in, longest first."""
        if self.source not in FOUND or self.target not in WRITTEN:
            return ()
        return FOUND[self.source](term)

    def written(self, term: str) -> str:
        """A target term's plural; the term itself where its language has no rules."""
        return WRITTEN[self.target](term) if self.target in WRITTEN else term


NO_RULES = PluralRules()  # languages without rules, or unnamed: every term as given
