"""What must not be translated: taken out of a sentence before decoding, put back after.

URLs, e-mail addresses, code in backticks, placeholders of format strings (`%s`, `%1$d`,
`{name}`, `{0}`, `$VAR`, `${VAR}`), numbers and dates in digits, and runs of emoji and other
symbols beyond ASCII ("€", "×", "→"; and, in HTML or XML, inline tags and entity references:
service.runtime.markup)
are each replaced by a marker the translator copies through ("ZZ1", "ZZ2", ...: the
shipped translator gives such a token back unchanged where it gives "__1__" back broken;
`python -m bench.preservation` measures it), and the marker in the translation is replaced
by the item again, exactly. A marker the translation lost is put back at the end of the
sentence, before its final punctuation, so that no item is ever dropped.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from service.runtime import glossary
from service.runtime.glossary import Found, Term, find_terms
from service.runtime.markup import ENTITY, TAG
from service.runtime.plurals import NO_RULES, PluralRules

KINDS = {  # earlier kinds win where two would match at one place
    "url": r"\b(?:https?://|www\.)[^\s<>\"'`]*[^\s<>\"'`.,;:!?)\]}»]",
    "email": r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}\b",
    "code": r"`[^`\n]+`",
    # not "% d" that starts a word: a percent sign ("el 50% de", "un 5 % es")
    "placeholder": r"%(?![-+ 0#]* [sdifuxXeEgGcp]\w)(?:\d+\$)?[-+ 0#]*\d*(?:\.\d+)?[sdifuxXeEgGcp]"
    r"|\{[A-Za-z_0-9][\w.]*\}|\$\{[A-Za-z_]\w*\}|\$[A-Z_][A-Z0-9_]*\b",
    "number": r"(?<![\w.,])\d+(?:[.,:/-]\d+)*(?![\w])",
}
PATTERN = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in KINDS.items()))
MARKUP = {"tag": TAG, "entity": ENTITY}  # a text in HTML or XML: before the others
MARKUP_PATTERN = re.compile(
    "|".join(f"(?P<{name}>{pattern})" for name, pattern in {**MARKUP, **KINDS}.items())
)
MARKER = "ZZ{}"
_FRAGMENT = re.compile(r"Z+\d+(?!\d)")  # after a letter too: the model glues one to a word
_FINAL = re.compile(r"[.!?…:;»\"')\]]*\s*$")
_SYMBOLS = ("So", "Sk", "Sc", "Sm", "Cs")  # Unicode categories of symbols


_BEYOND_ASCII = re.compile(r"[^\x00-\x7f]")  # where a symbol (`_symbol`) can be


def _symbol(character: str) -> bool:
    """An emoji or other symbol beyond ASCII (or a joiner or modifier inside one): currency
    signs and mathematical symbols too ("€", "×"), which the model mistranslates."""
    if character in "\u200d\ufe0f":
        return True
    return ord(character) > 127 and unicodedata.category(character) in _SYMBOLS


def _found(marker: str) -> re.Pattern:
    """A marker where it stands alone or next to another: not inside a word or a number."""
    return re.compile(rf"(?<![A-Za-z]){marker}(?!\d)")


@dataclass(frozen=True)
class Item:
    kind: str
    text: str
    marker: str
    space_before: bool = True  # white space (or the sentence's edge) before it in the source
    space_after: bool = True
    entry: int = -1  # a term: its glossary entry (its text is the target term)


@dataclass(frozen=True)
class Masked:
    """A sentence with its protected items replaced by markers."""

    text: str
    items: tuple[Item, ...]
    plain: Masked | None = None  # with glossary terms: the sentence masked without them
    rules: PluralRules = NO_RULES  # the plurals its glossary terms were found by

    def terms_used(self, translation: str) -> bool:
        """Whether a translation holds every glossary term's target as this sentence's
        markers would put it (any case; the plural where the source's was), as many times
        as the sentence holds the term ("casa" twice: "home" twice)."""
        targets = Counter(item.text.casefold() for item in self.items if item.entry >= 0)
        return all(glossary.used(t, translation, self.rules) >= n for t, n in targets.items())

    def restore(self, translation: str, partial: bool = False) -> str:
        """The translation with every marker replaced by its item, each item exactly once.
        A `partial` translation (a stream's, still growing) gets the markers it holds back,
        loses a marker it is in the middle of, and is not given the ones still to come."""
        if not self.items:  # nothing to put back: the model's text as its tokenizer wrote it
            return translation
        if partial:
            translation = re.sub(r"\s*\bZ+\d*$", "", translation)  # "▁Z" is its first piece
        # a marker the model broke ("Z3" for "ZZ3") is dropped, its item comes back below;
        # what the source itself holds ("a BMW Z3,") is kept
        known = {item.marker for item in self.items} | set(_FRAGMENT.findall(self.text))
        translation = _FRAGMENT.sub(lambda m: m.group() if m.group() in known else "", translation)
        for item in self.items:
            found = [m.start() for m in _found(item.marker).finditer(translation)]
            if not found and partial:
                continue
            if not found:
                end = _FINAL.search(translation).start()
                space = " " if end and not translation[end - 1].isspace() else ""
                translation = f"{translation[:end]}{space}{item.marker}{translation[end:]}"
            else:  # a marker repeated by the model: its first place only
                for start in reversed(found[1:]):
                    translation = translation[:start] + translation[start + len(item.marker) :]
        # spaces doubled where a marker was dropped are one; an item's own stay as they are
        return self._put_back(re.sub(r"  +", " ", translation))

    def _put_back(self, translation: str) -> str:
        """Every marker replaced by its item; tags in their source order at the places the
        markers of tags hold (so they nest as in the source), without the white space the
        markers of markup were given where the source had none."""
        found = sorted(
            (m.start(), m.end(), item)
            for item in self.items
            for m in _found(item.marker).finditer(translation)
        )
        tags = iter([item for item in self.items if item.kind == "tag"])
        parts, cursor = [], 0
        for start, end, item in found:
            if item.kind == "tag":
                item = next(tags)
            before = translation[cursor:start]
            markup = item.kind in MARKUP  # its markers' padding is not the source's
            if markup and not item.space_before:
                before = before.rstrip()
            parts += [before, item.text]
            cursor = end
            if markup and not item.space_after:
                rest = translation[cursor:]
                cursor += len(rest) - len(rest.lstrip())
        parts.append(translation[cursor:])
        return "".join(parts)


def _spans(text: str, markup: bool = False) -> list[tuple[str, int, int]]:
    """(kind, start, end) of every protected item, in order, without overlaps."""
    pattern = MARKUP_PATTERN if markup else PATTERN
    spans = [(m.lastgroup, m.start(), m.end()) for m in pattern.finditer(text)]
    taken: list[bool] = []
    i = 0  # where the last run of symbols ended
    for beyond in _BEYOND_ASCII.finditer(text):  # runs of symbols outside the other items
        start = beyond.start()
        if start < i or not _symbol(text[start]):
            continue
        if not taken:
            taken = [False] * len(text)
            for _, begin, end in spans:
                taken[begin:end] = [True] * (end - begin)
        if taken[start]:
            continue
        j = start
        while j < len(text) and not taken[j] and (_symbol(text[j]) or text[j] == " "):
            j += 1
        while text[j - 1] == " ":
            j -= 1
        spans.append(("symbol", start, j))
        i = j
    return sorted(spans, key=lambda s: s[1])


def mask(
    text: str,
    markup: bool = False,
    terms: tuple[Term, ...] = (),
    rules: PluralRules = NO_RULES,
) -> Masked:
    """The sentence with each protected item replaced by a marker no word of it contains;
    `markup`: the sentence is in HTML or XML (its inline tags and entities are items);
    `terms`: a glossary, each place a term is found (also in its plurals of `rules`, the
    request's languages') an item whose text is its target."""
    spans = _spans(text, markup)
    replaced: dict[int, Found] = {}
    for found in find_terms(text, terms, rules) if terms else ():
        met = [s for s in spans if s[1] < found.end and found.start < s[2]]
        # an item wholly inside a term ("artículo 5") is the term's; a term never cuts an
        # item ("casa" in a URL) nor takes markup's place
        if all(found.start <= s[1] and s[2] <= found.end and s[0] not in MARKUP for s in met):
            spans = [s for s in spans if s not in met]
            replaced[found.start] = found
            spans.append(("term", found.start, found.end))
    spans.sort(key=lambda s: s[1])
    if not spans:
        return Masked(text, ())
    base = MARKER
    while any(base.format("") in word for word in text.split()):
        base = "Z" + base  # the text holds a word like the marker: a longer one
    parts, items, cursor = [], [], 0
    for number, (kind, start, end) in enumerate(spans, 1):
        marker = base.format(number)
        space_before = start == 0 or text[start - 1].isspace()
        space_after = end == len(text) or text[end].isspace()
        term = replaced.get(start) if kind == "term" else None
        if term is None:
            content = text[start:end]
        else:  # a target is text: in markup, its "&" and "<" written as the markup's text
            content = html.escape(term.text, quote=False) if markup else term.text
        items.append(
            Item(
                kind,
                content,
                marker,
                space_before,
                space_after,
                -1 if term is None else term.entry,
            )
        )
        # a marker never touches a letter or a digit, so that it stays a word of its own
        before = " " if start > 0 and text[start - 1].isalnum() else ""
        after = " " if end < len(text) and text[end].isalnum() else ""
        parts += [text[cursor:start], before, marker, after]
        cursor = end
    parts.append(text[cursor:])
    plain = mask(text, markup) if replaced else None
    return Masked("".join(parts), tuple(items), plain, rules)
