"""The language a translated file declares. Where a format says what language its text is
in (HTML's `lang` and `xml:lang` and its Content-Language `<meta>`, an EPUB's `dc:language`,
a .docx's `w:lang`, a .pptx's `lang` and `altLang`, ODF's `fo:language` and `fo:country`,
the document properties' `dc:language`), a declaration of the source language is made the
target's (`Relabel`), so that a browser, a screen reader or a spell checker reads the
translation as what it is; one of another language (a phrase the author marked as English
in a Spanish page) is the author's, and stays."""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.runtime import languages, markup


@dataclass(frozen=True)
class Relabel:
    """The languages a file was translated from and into, as BCP 47 tags (languages.tag)."""

    source: str
    target: str

    def value(self, declared: str) -> str | None:
        """The target's tag where `declared` names the source's language (by its primary
        subtag: `es`, `es-ES` and `es_ES` name Spanish), else None: it stays."""
        if declared.strip() and languages.primary(declared) == languages.primary(self.source):
            return self.target
        return None

    def subtags(self) -> tuple[str, str]:
        """The target's language and region (ODF writes them apart; "" where it names none):
        `en` and `GB` of `en-GB`, `zh` and "" of `zh-Hant`."""
        language, *rest = self.target.split("-")
        region = next((s for s in rest if re.fullmatch(r"[A-Za-z]{2}|\d{3}", s)), "")
        return language.lower(), region.upper()


# an attribute of a tag: its name, and its value quoted or not (a quoted one read whole, so
# that `title="lang=es"` names no language)
_ATTRIBUTE = re.compile(r"""([^\s"'<>/=]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'<>=`]+))?""")
MARKUP_LANG = ("lang", "xml:lang")  # the attributes that say an element's language
# an element `language` of any prefix (an EPUB package's `dc:language`) and its text (read
# whole: the spaces around its value are parted from it after, a match taking linear time)
_LANGUAGE_ELEMENT = re.compile(
    r"(<(?:[\w.-]+:)?language(?:\s[^<>]*)?>)([^<]*)(</(?:[\w.-]+:)?language\s*>)"
)


def in_markup(text: str, relabels: list[Relabel]) -> str:
    """HTML or XML `text` with each `lang` and `xml:lang` of its tags (outside comments and
    scripts) made the target's where it names the source's language, for each of
    `relabels` in turn; its quotes and everything else as they were."""
    for relabel in relabels:
        kept, at = [], 0
        for tag in markup.shown_tags(text):
            relabelled = _tag_relabelled(tag.group(), relabel)
            if relabelled != tag.group():
                kept += [text[at : tag.start()], relabelled]
                at = tag.end()
        text = "".join(kept) + text[at:]
    return text


def _tag_relabelled(tag: str, relabel: Relabel) -> str:
    if tag.startswith("</") or "lang" not in tag.lower():
        return tag
    name = re.match(r"<[\w:.-]+", tag)
    attributes = [a for a in _ATTRIBUTE.finditer(tag, name.end()) if a.group(2) is not None]
    values = {a.group(1).lower(): a.group(2).strip("\"'") for a in attributes}
    listing = markup.tag_name(tag).rpartition(":")[2] == "meta" and (
        values.get("http-equiv", "").strip().lower() == "content-language"
    )  # its `content` lists the page's languages
    out, at = [tag[: name.end()]], name.end()
    for attribute in attributes:
        quoted, named = attribute.group(2), attribute.group(1).lower()
        if named in MARKUP_LANG:
            value = relabel.value(quoted.strip("\"'"))
        elif named == "content" and listing:
            value = _listed(quoted.strip("\"'"), relabel)
        else:
            continue
        quote = quoted[0] if quoted[0] in "\"'" else ""
        if value is not None:
            out.append(tag[at : attribute.start(2)] + f"{quote}{value}{quote}")
            at = attribute.end(2)
    return "".join(out) + tag[at:]


def _listed(listed: str, relabel: Relabel) -> str | None:
    """A Content-Language list ("es, en": the languages of a page's readers) with the
    source's entries the target's, each language once ("es, en" into English: "en"; into
    French: "fr, en"), the others and the spaces between them as they were; None where it
    names no source language."""
    entries = listed.split(",")
    relabelled = [relabel.value(entry) for entry in entries]
    if not any(relabelled):
        return None
    kept, seen = [], set()
    for entry, value in zip(entries, relabelled, strict=True):
        entry = entry if value is None else entry.replace(entry.strip(), value)
        if entry.strip().lower() not in seen:
            seen.add(entry.strip().lower())
            kept.append(entry)
    return ",".join(kept)


# the relationship of an Office package (.docx, .pptx) to its document properties
# (docProps/core.xml), python-docx's and python-pptx's both
CORE_PROPERTIES = (
    "http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties"
)
# their content type: the libraries read a part of another as bytes, not as properties
CORE_PROPERTIES_TYPE = "application/vnd.openxmlformats-package.core-properties+xml"


def core_part(package):
    """The part of an Office package (python-docx's or python-pptx's) that holds its
    document properties, or None where it has none, or none of their content type:
    asked for their properties, both libraries would add default ones (a title, an author)
    to a file that had none."""
    try:
        part = package.part_related_by(CORE_PROPERTIES)
    except KeyError:
        return None
    return part if part.content_type == CORE_PROPERTIES_TYPE else None


def in_properties(properties, relabel: Relabel) -> None:
    """Document properties (python-docx's or python-pptx's CoreProperties, or None) with
    their language (`dc:language`) the target's where it names the source's."""
    value = None if properties is None else relabel.value(properties.language or "")
    if value is not None:
        properties.language = value


def in_package(text: str, relabels: list[Relabel]) -> str:
    """An EPUB package (its OPF) with each `dc:language` made the target's where it names
    the source's language; its other metadata (a title, an author) is not translated, and
    says what it said."""
    # the package's own `xml:lang` (a title's too) is the language of that metadata's text,
    # not the book's: the text stays Spanish, and so does what says so
    for relabel in relabels:

        def relabelled(element: re.Match, relabel: Relabel = relabel) -> str:
            opened, said, closed = element.groups()
            value = relabel.value(said)
            if value is None:
                return element.group()
            return f"{opened}{said.replace(said.strip(), value, 1)}{closed}"

        text = _LANGUAGE_ELEMENT.sub(relabelled, text)
    return text
