"""Spanish-English pairs from Firefox ESR's Fluent strings.

Firefox keeps its interface text in Fluent files (`localization/<locale>/**/*.ftl`): the
English ones inside the program's `omni.ja` archives (package `firefox-esr`), the Spanish ones
inside the language pack (`firefox-esr-l10n-es-es`, an .xpi archive). A message is
`id = value`, with `.attribute = value` lines (a label, a tooltip) below it; the two languages
pair by file, message id and attribute. Term references (`{ -brand-short-name }`) are replaced
by the term's own value; a message with a variable or a selector (`{ $count -> ...}`) is
dropped, like a catalog entry with a placeholder. Keyboard shortcuts and access keys are not
text and are skipped.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

ENGLISH, SPANISH = "firefox-esr", "firefox-esr-l10n-es-es"  # packages
ARCHIVES = {ENGLISH: "*omni.ja", SPANISH: "*.xpi"}  # what is taken out of each
_ENTRY = re.compile(r"^(-?[A-Za-z][\w-]*)\s*=\s?(.*)$")
_ATTRIBUTE = re.compile(r"^\s+\.([\w-]+)\s*=\s?(.*)$")
_TERM = re.compile(r"\{\s*(-[\w-]+)(?:\.[\w-]+)?(?:\([^)]*\))?\s*\}")
_LITERAL = re.compile(r'\{\s*"([^"{}]*)"\s*\}')
NOT_TEXT = ("accesskey", "key", "commandkey", "style", "width", "height", "keycode", "modifiers")


def messages(text: str) -> dict[str, str]:
    """`id` and `id.attribute` of one Fluent file to their raw values (lines joined)."""
    values: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        entry = _ENTRY.match(line)
        if entry:
            current = entry.group(1)
            values[current] = [entry.group(2)]
            message = current
            continue
        if current is None or not line[0].isspace():
            current = None
            continue
        attribute = _ATTRIBUTE.match(line)
        if attribute:
            current = f"{message}.{attribute.group(1)}"
            values[current] = [attribute.group(2)]
        else:
            values[current].append(line.strip())
    return {key: " ".join(v for v in value if v).strip() for key, value in values.items()}


def resolve(value: str, terms: dict[str, str]) -> str | None:
    """The value with its term references and string literals replaced; None when anything
    else (a variable, a selector, an unknown term) remains."""
    for _ in range(3):  # terms may refer to terms
        value = _TERM.sub(lambda m: terms.get(m.group(1), m.group(0)), value)
    value = _LITERAL.sub(lambda m: m.group(1), value)
    return None if "{" in value or "}" in value else value


def archive_files(archive: Path, locale: str) -> dict[str, str]:
    """The Fluent files of one archive: path below `localization/<locale>/` (wherever that
    folder is, `browser/` or the root) to its text."""
    marker = f"localization/{locale}/"
    with zipfile.ZipFile(archive) as z:
        return {
            name.partition(marker)[2]: z.read(name).decode("utf-8")
            for name in z.namelist()
            if marker in name and name.endswith(".ftl")
        }


def locale_messages(files: dict[str, str]) -> dict[tuple[str, str], str]:
    """(file, key) to resolved value for every message of one locale, terms of every file
    resolved; terms themselves and the attributes that are not text are left out."""
    parsed = {path: messages(text) for path, text in files.items()}
    terms = {k: v for m in parsed.values() for k, v in m.items() if k.startswith("-")}
    resolved = {}
    for path, entries in parsed.items():
        for key, value in entries.items():
            if key.startswith("-") or (key.rpartition(".")[2] in NOT_TEXT and "." in key):
                continue
            text = resolve(value, terms)
            if text:
                resolved[(path, key)] = text
    return resolved


def firefox_pairs(english_tree: Path, spanish_tree: Path) -> list[tuple[str, str]]:
    """(Spanish, English) of every message both locales have, in key order (raw: the catalogs'
    cleaning applies)."""
    english: dict[str, str] = {}
    for archive in sorted(english_tree.rglob("omni.ja")):
        english |= archive_files(archive, "en-US")
    spanish: dict[str, str] = {}
    for archive in sorted(spanish_tree.rglob("*.xpi")):
        spanish |= archive_files(archive, "es-ES")
    en, es = locale_messages(english), locale_messages(spanish)
    return [(es[key], en[key]) for key in sorted(en.keys() & es.keys())]
