"""Word and phrase pairs from Apertium's Spanish-English bilingual dictionary.

The package `apertium-eng-spa` ships the dictionary compiled into a finite-state transducer
(`spa-eng.autobil.bin`); `lt-print` (package `lttoolbox-dev`) dumps it in AT&T text form, one
arc per line (`from to input output weight`, epsilon as "ε"), one final state per short line,
transducers separated by "--". Every path of the first transducer from state 0 to a final
state is one entry, e.g. `tenedor<n><m>` to `fork<n>`; the later transducers are the patterns
for numbers and punctuation, not words. An entry is kept when it is a common noun, adjective,
full verb, adverb or interjection made of letters only (no acronyms, no proper nouns); the
lemma queue mark `#` ("punto# de partida") is dropped. Dictionary words teach the translator
the everyday vocabulary the software catalogs and the Bible lack ("tenedor", "contraseña");
they are human-made, so training does not tag them as synthetic.
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

BILINGUAL = Path("/usr/share/apertium/apertium-eng-spa/spa-eng.autobil.bin")
PACKAGES = ("apertium-eng-spa", "lttoolbox-dev")
KEPT = frozenset({"n", "adj", "vblex", "adv", "ij"})
_ENTRY = re.compile(r"^([^<]+)((?:<[^>]+>)*)$")
_WORDS = re.compile(r"^[^\W\d_]+(?:[ '-][^\W\d_]+)*$")
EPSILON = "ε"


def paths(att: str) -> list[tuple[str, str]]:
    """(input, output) of every path of the first transducer in `att` (lt-print's output).
    An arc back to a state already on the path (a loop) is not followed."""
    section = att.split("--\n", 1)[0]
    arcs: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    finals: set[int] = set()
    for line in section.splitlines():
        fields = line.rstrip("\t").split("\t")
        if len(fields) >= 4:
            arcs[int(fields[0])].append((int(fields[1]), fields[2], fields[3]))
        elif fields[0]:
            finals.add(int(fields[0]))
    found = []
    stack: list[tuple[int, str, str, frozenset[int]]] = [(0, "", "", frozenset({0}))]
    while stack:
        state, source, target, on_path = stack.pop()
        if state in finals:
            found.append((source, target))
        for to, a, b in arcs[state]:
            if to not in on_path:
                a, b = ("" if a == EPSILON else a), ("" if b == EPSILON else b)
                stack.append((to, source + a, target + b, on_path | {to}))
    return found


def _split(entry: str) -> tuple[str, list[str]] | None:
    match = _ENTRY.match(entry)
    if match is None:
        return None
    lemma = re.sub(r"\s+", " ", match.group(1).replace("#", "")).strip()
    return lemma, re.findall(r"<([^>]+)>", match.group(2))


@dataclass(frozen=True)
class Entry:
    """One kept dictionary entry: lemmas, kind (n, adj, vblex, adv, ij) and, for a Spanish
    noun, its gender (m, f, mf or "")."""

    spanish: str
    english: str
    kind: str
    gender: str = ""


def word_entries(entries: list[tuple[str, str]]) -> list[Entry]:
    """The entries of the kept kinds made of letters only, deduplicated, in dictionary order."""
    kept = []
    for spanish, english in entries:
        a, b = _split(spanish), _split(english)
        if a is None or b is None or not a[1] or a[1][0] not in KEPT or "acr" in a[1] + b[1]:
            continue
        if _WORDS.match(a[0]) and _WORDS.match(b[0]):
            gender = next((t for t in a[1][1:] if t in ("m", "f", "mf")), "")
            kept.append(Entry(a[0], b[0], a[1][0], gender))
    return list(dict.fromkeys(kept))


def word_pairs(entries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(Spanish, English) lemma pairs of the kept kinds, deduplicated, in dictionary order."""
    return list(dict.fromkeys((e.spanish, e.english) for e in word_entries(entries)))


def dictionary_entries(path: Path = BILINGUAL) -> list[Entry]:
    """The kept entries of the installed dictionary (needs `lt-print`)."""
    att = subprocess.run(["lt-print", str(path)], capture_output=True, text=True, check=True)
    return word_entries(paths(att.stdout))
