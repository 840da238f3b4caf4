"""Spanish-English pairs from Unicode CLDR (Debian `unicode-cldr-core`): names and phrases
both locales give for the same key.

- emoji names (`annotations`, text-to-speech names): "manzana roja" / "red apple";
- territories and languages: "Canadá" / "Canada", "alemán" / "German";
- units, long form, singular and plural, the number filled in: "3 kilómetros" / "3
  kilometers";
- relative dates: "ayer" / "yesterday", "dentro de 3 semanas" / "in 3 weeks", "hace 3 días" /
  "3 days ago";
- month and weekday names (Gregorian, wide, both the formatting and the standalone form).

Every pair comes from the same key in `es.xml` and `en.xml`, so nothing is aligned by guess.
Variants (`alt=...`), draft entries and placeholders other than `{0}` are left out.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

CLDR = Path("/usr/share/unicode/cldr/common")
NOT_PLACES = frozenset({"EU", "EZ", "QO", "UN", "ZZ"})  # unions and groups, not countries
PLURAL_NUMBERS = {"one": "1", "other": "3"}  # the count each plural form is filled with


def _texts(root: ET.Element, path: str, key) -> dict:
    """Element text by `key(element)` for the elements at `path` without alt or draft."""
    found = {}
    for element in root.iterfind(path):
        if element.get("alt") or element.get("draft") in ("unconfirmed", "provisional"):
            continue
        if element.text and element.text.strip():
            found.setdefault(key(element), element.text.strip())
    return found


def _display_names(root: ET.Element) -> dict:
    names = {}
    for kind in ("territories/territory", "languages/language"):
        names |= _texts(root, f"localeDisplayNames/{kind}", lambda e, k=kind: (k, e.get("type")))
    return names


def _units(root: ET.Element) -> dict:
    units = {}
    for unit in root.iterfind("units/unitLength[@type='long']/unit"):
        for pattern in unit.iterfind("unitPattern"):
            count = pattern.get("count")
            if count in PLURAL_NUMBERS and pattern.text and not pattern.get("case"):
                units[("unit", unit.get("type"), count)] = pattern.text.replace(
                    "{0}", PLURAL_NUMBERS[count]
                ).strip()
    return units


def _relative(root: ET.Element) -> dict:
    phrases = {}
    for field in root.iterfind("dates/fields/field"):
        kind = field.get("type")
        if "-" in kind:  # short and narrow forms
            continue
        for relative in field.iterfind("relative"):
            if relative.text:
                phrases[("relative", kind, relative.get("type"))] = relative.text.strip()
        for time in field.iterfind("relativeTime"):
            for pattern in time.iterfind("relativeTimePattern"):
                count = pattern.get("count")
                if count in PLURAL_NUMBERS and pattern.text:
                    key = ("relativeTime", kind, time.get("type"), count)
                    phrases[key] = pattern.text.replace("{0}", PLURAL_NUMBERS[count]).strip()
    return phrases


def _calendar(root: ET.Element) -> dict:
    names = {}
    calendar = "dates/calendars/calendar[@type='gregorian']"
    for kind, width_path in (("month", "months/monthContext"), ("day", "days/dayContext")):
        for context in root.iterfind(f"{calendar}/{width_path}"):
            path = f"{kind}Width[@type='wide']/{kind}"
            texts = _texts(context, path, lambda e: e.get("type"))
            for key, text in texts.items():
                names[(kind, context.get("type"), key)] = text
    return names


def entries(language: str, root: Path = CLDR) -> dict:
    """Every text of `language` this module pairs, by a key shared across locales."""
    main = ET.parse(root / "main" / f"{language}.xml").getroot()
    annotations = ET.parse(root / "annotations" / f"{language}.xml").getroot()
    found = _texts(
        annotations,
        "annotations/annotation[@type='tts']",
        lambda e: ("emoji", e.get("cp")),
    )
    for part in (_display_names, _units, _relative, _calendar):
        found |= part(main)
    return found


def cldr_pairs(root: Path = CLDR) -> list[tuple[str, str]]:
    """(Spanish, English) pairs for every key both locales give, in key order, deduplicated;
    a text with a placeholder left (`{1}`, ...) is left out."""
    spanish, english = entries("es", root), entries("en", root)
    pairs = []
    for key in sorted(set(spanish) & set(english), key=str):
        source, target = spanish[key], english[key]
        if "{" in source or "{" in target:
            continue
        pairs.append((source, target))
    return list(dict.fromkeys(pairs))


def display_name_pairs(kind: str, codes: tuple[str, ...] | None = None, root: Path = CLDR):
    """(Spanish, English) display names of `kind` ("territories/territory" for countries,
    "languages/language"), for `codes` or every alphabetic code both locales name; private-use
    codes (X...) and groups of countries are left out."""
    spanish, english = entries("es", root), entries("en", root)
    wanted = [
        code
        for k, code in sorted(key for key in spanish if key[0] == kind)
        if code.isalpha()
        and code not in NOT_PLACES
        and not code.startswith("X")
        and (codes is None or code in codes)
    ]
    return [(spanish[(kind, c)], english[(kind, c)]) for c in wanted if (kind, c) in english]
