"""Modern Spanish-English sentence pairs from the gettext catalogs of Debian packages.

A translated program ships its Spanish messages as a compiled catalog
(`<prefix>/es/LC_MESSAGES/<domain>.mo`, usually under `usr/share/locale`): every entry pairs
an English original (msgid) with its Spanish translation (msgstr). The packages are fetched
with `apt-get download` into a cache and only their Spanish catalogs taken out of the
archive, never installed (installing them would pull gigabytes of dependencies); a second
build reads the cache only.

Each entry is cleaned the same way on both sides: keyboard accelerators (`_File`, `&File`)
and markup tags are removed, white space is collapsed. An entry is dropped when its original
holds a format placeholder (`%s`, `%(name)s`, `{0}`, `%1`, `$NAME`): the sentence is not whole
without its value. Untranslated entries (target equal to source), entries without a word,
URLs and paths, and very short or very long ones are dropped too; duplicates are kept once.
Packages of compiler and database jargon are capped (`CAPS`).

Packages are either training packages or held out whole for the `modern` test part
(`PACKAGES`); the test part then drops every pair whose normalised source or target also
occurs in training, so nothing leaks by repetition across packages.
"""

from __future__ import annotations

import gettext
import hashlib
import re
import shutil
import subprocess
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

# package: "train" or "modern" (held out whole for the test part)
PACKAGES = {
    "pidgin-data": "modern",
    "wesnoth-1.16-data": "modern",
    "hexchat-common": "modern",
    "gnome-maps": "modern",
    "gnome-weather": "modern",
    "gnome-clocks": "modern",
    "gnome-contacts": "modern",
    "gnome-calendar": "modern",
    "polari": "modern",
    "geary": "modern",
    "gimp-data": "train",
    "inkscape": "train",
    "vlc-l10n": "train",
    "gnucash-common": "train",
    "evolution-common": "train",
    "gedit-common": "train",
    "nautilus-data": "train",
    "gnome-control-center-data": "train",
    "totem-common": "train",
    "rhythmbox-data": "train",
    "shotwell-common": "train",
    "libreoffice-l10n-es": "train",
    "python3-django": "train",
    "digikam-data": "train",
    "gcc-12-locales": "train",
    "binutils-common": "train",
    "postgresql-15": "train",
    # more programs, each a few dozen to a few thousand pairs: GNOME, KDE and Xfce
    # applications, KStars, Krita, Freeciv, darktable, Audacity, Claws Mail, apt and others
    "krita-l10n": "train",
    "kstars-data": "train",
    "freeciv-data": "train",
    "gnome-software-common": "train",
    "evince-common": "train",
    "eog": "train",
    "gnome-disk-utility": "train",
    "gnome-system-monitor": "train",
    "gnome-terminal-data": "train",
    "baobab": "train",
    "file-roller": "train",
    "gnome-text-editor": "train",
    "simple-scan": "train",
    "cheese-common": "train",
    "gnome-music": "train",
    "gnome-tweaks": "train",
    "gnome-shell-common": "train",
    "mutter-common": "train",
    "seahorse": "train",
    "gnome-calculator": "train",
    "gnome-characters": "train",
    "gnome-font-viewer": "train",
    "gnome-logs": "train",
    "gnome-sound-recorder": "train",
    "epiphany-browser-data": "train",
    "yelp": "train",
    "gnome-boxes": "train",
    "dconf-editor": "train",
    "brasero-common": "train",
    "sound-juicer": "train",
    "gthumb-data": "train",
    "thunar-data": "train",
    "xfce4-panel": "train",
    "mousepad": "train",
    "ristretto": "train",
    "dolphin": "train",
    "konsole": "train",
    "okular": "train",
    "gwenview": "train",
    "kdenlive-data": "train",
    "k3b-i18n": "train",
    "audacity-data": "train",
    "hugin-data": "train",
    "darktable": "train",
    "filezilla-common": "train",
    "gnumeric-common": "train",
    "claws-mail-i18n": "train",
    "liferea-data": "train",
    "audacious-plugins-data": "train",
    "deluge-common": "train",
    "aptitude-common": "train",
    "apt": "train",
    "synaptic": "train",
    "gnupg-l10n": "train",
    "network-manager-gnome": "train",
    "network-manager": "train",
    "xfce4-settings": "train",
    "lightdm-gtk-greeter": "train",
    "kdeconnect": "train",
    "kalzium-data": "train",
    "marble-data": "train",
    "kgeography-data": "train",
    "kdevelop-l10n": "train",
    "tuxpaint-data": "train",
}
# compiler and database jargon: at most this many pairs of these packages (a seeded choice)
CAPS = {"gcc-12-locales": 2000, "binutils-common": 2000, "postgresql-15": 2000}
MODERN_PAIRS = 2000  # the modern test part: a seeded choice among the held-out pairs
LOCALE_DIRS = ("usr/share/locale/es/LC_MESSAGES",)  # where most packages put their catalogs
CATALOGS = "*/es/LC_MESSAGES/*.mo"  # anywhere (LibreOffice, Wesnoth and others elsewhere)
MIN_WORDS, MAX_CHARS = 2, 300

_ACCELERATOR = re.compile(r"(?<![\w&])&(?=\w)|_(?=\w)")
_TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s[^<>]*)?/?>")
_ENTITY = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'", "&#39;": "'"}
_PLACEHOLDER = re.compile(
    r"%(?:\([\w-]+\))?[-+ #0]*\d*(?:\.\d+)?[hlLqjzt]*[diouxXeEfFgGcrsaAp%]"  # printf, Python
    r"|\{[\w.:!-]*\}"  # str.format, Qt/Fluent-like braces
    r"|%\d+|\$\{?[A-Za-z_]\w*\}?"  # Qt %1, shell $NAME / ${NAME}
)
_NOT_PROSE = re.compile(r"https?://|www\.|\w+\.\w{2,4}/|^[/~]|\\n|\.(?:png|svg|desktop)\b")
_SPACE = re.compile(r"\s+")
_LETTER = re.compile(r"[^\W\d_]{2,}")


@dataclass
class CatalogStats:
    """What a build read and kept, per package."""

    entries: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # by reason, over all packages


def clean(text: str) -> str:
    """Accelerators and markup removed, entities resolved, white space collapsed, NFC."""
    text = _TAG.sub(" ", text)
    for entity, character in _ENTITY.items():
        text = text.replace(entity, character)
    if text.count("_") <= 1:  # one underscore is an accelerator mark; more are a name
        text = _ACCELERATOR.sub("", text)
    else:
        text = _ACCELERATOR.sub(lambda m: "" if m.group() == "&" else m.group(), text)
    return unicodedata.normalize("NFC", _SPACE.sub(" ", text).strip())


def normalised(text: str) -> str:
    """The form two texts are compared in for leaks: case-folded, letters and digits only."""
    return " ".join(re.findall(r"\w+", text.casefold()))


def why_dropped(source: str, target: str, original: str) -> str | None:
    """The reason to drop a cleaned pair (None: kept); `original` is the raw msgid."""
    if _PLACEHOLDER.search(original):
        return "placeholder"
    if not source or not target or source == target:
        return "untranslated"
    if _NOT_PROSE.search(source) or _NOT_PROSE.search(target):
        return "not prose"
    if len(_LETTER.findall(source)) < MIN_WORDS or len(_LETTER.findall(target)) < MIN_WORDS:
        return "too short"
    if max(len(source), len(target)) > MAX_CHARS:
        return "too long"
    return None


def catalog_entries(path: Path) -> list[tuple[str, str]]:
    """(msgid, msgstr) of a compiled catalog's singular entries, message context stripped."""
    with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # the parsed entries
    entries = []
    for key, value in catalog.items():
        if not isinstance(key, str) or not key or not value:  # header, plural forms
            continue
        entries.append((key.rpartition("\x04")[2], value))  # "context\x04msgid"
    return sorted(entries)


def package_pairs(tree: Path, stats: CatalogStats, package: str) -> list[tuple[str, str]]:
    """Cleaned (Spanish, English) pairs of every Spanish catalog under an unpacked package."""
    entries = [
        (translation, original)
        for path in sorted(tree.glob("**/es/LC_MESSAGES/*.mo"))
        for original, translation in catalog_entries(path)
    ]
    return cleaned_pairs(entries, stats, package)


def cleaned_pairs(
    entries: list[tuple[str, str]], stats: CatalogStats, package: str
) -> list[tuple[str, str]]:
    """The (Spanish, English) entries of one package cleaned, those to drop left out and
    counted by reason."""
    pairs = []
    for translation, original in entries:
        stats.entries[package] = stats.entries.get(package, 0) + 1
        source, target = clean(translation), clean(original)
        reason = why_dropped(source, target, original)
        if reason is None:
            pairs.append((source, target))
        else:
            stats.dropped[reason] = stats.dropped.get(reason, 0) + 1
    return pairs


def fetch(package: str, cache: Path, pattern: str = CATALOGS) -> Path:
    """The package's files matching `pattern` (its Spanish catalogs) unpacked under
    `cache/tree/<package>` (downloaded and unpacked once; nothing else is taken out of the
    archive)."""
    tree = cache / "tree" / package
    if tree.is_dir():
        return tree
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    if not list(debs.glob(f"{package}_*.deb")):
        subprocess.run(["apt-get", "download", package], cwd=debs, check=True, capture_output=True)
    deb = sorted(debs.glob(f"{package}_*.deb"))[-1]
    tree.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=tree.parent, prefix=f".{tree.name}-"))
    archive = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True
    ).stdout
    subprocess.run(  # no Spanish catalog in the package is not an error: tar exits 2
        ["tar", "-x", "-C", str(partial), "--wildcards", pattern],
        input=archive,
        capture_output=True,
    )
    try:
        partial.rename(tree)
    except OSError:  # another build unpacked it meanwhile: the same files, keep theirs
        shutil.rmtree(partial)
        if not tree.is_dir():
            raise
    return tree


def build_pairs(
    trees: dict[str, Path],
    roles: dict[str, str] = PACKAGES,
    extra: dict[str, list[tuple[str, str]]] | None = None,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], CatalogStats]:
    """(training pairs, modern test pairs, stats) of unpacked packages and `extra` training
    pairs by source (CLDR), deduplicated; the test pairs exclude every pair whose normalised
    source or target occurs in training."""
    stats = CatalogStats()
    parts: dict[str, dict[tuple[str, str], None]] = {"train": {}, "modern": {}}
    for package, tree in sorted(trees.items()):
        pairs = list(dict.fromkeys(package_pairs(tree, stats, package)))
        pairs = _seeded(pairs, CAPS.get(package, len(pairs)))
        stats.kept[package] = len(pairs)
        parts[roles[package]].update(dict.fromkeys(pairs))
    for source, pairs in sorted((extra or {}).items()):
        stats.entries[source] = stats.kept[source] = len(pairs)
        parts["train"].update(dict.fromkeys(pairs))
    train = list(parts["train"])
    seen = {normalised(s) for s, _ in train} | {normalised(t) for _, t in train}
    modern = [
        (s, t)
        for s, t in parts["modern"]
        if normalised(s) not in seen and normalised(t) not in seen and (s, t) not in parts["train"]
    ]
    return train, _seeded(modern, MODERN_PAIRS), stats


def _seeded(pairs: list[tuple[str, str]], count: int) -> list[tuple[str, str]]:
    """At most `count` of `pairs`, chosen by their hash (the same whatever the order)."""
    if len(pairs) <= count:
        return pairs
    return sorted(pairs, key=lambda pair: hashlib.sha256("\t".join(pair).encode()).digest())[:count]


EVERYDAY = Path(__file__).resolve().parent / "testsets" / "everyday.tsv"
CACHE = Path("data") / "debian-cache"


def read_everyday(path: Path = EVERYDAY) -> tuple[list[str], list[str]]:
    """(Spanish, English) of the everyday test part, written for this project."""
    lines = path.read_text(encoding="utf-8").splitlines()
    pairs = [line.split("\t") for line in lines if line and not line.startswith("#")]
    return [s for s, _ in pairs], [e for _, e in pairs]


def _write(out: Path, name: str, pairs: list[tuple[str, str]]) -> None:
    for side, language in ((0, "es"), (1, "en")):
        text = "".join(pair[side] + "\n" for pair in pairs)
        (out / f"{name}.{language}").write_text(text, encoding="utf-8")


def catalog_parts(cache: Path = CACHE, roles: dict[str, str] = PACKAGES):
    """(training pairs, modern test pairs, stats, extra training pairs by source) of the
    packages' catalogs, CLDR's names and Firefox's strings: the part of the build that the
    modern test part needs (models.commands, bench.glossary)."""
    from models.cldr import CLDR, cldr_pairs
    from models.fluent import ARCHIVES, ENGLISH, SPANISH, firefox_pairs

    trees = {package: fetch(package, cache) for package in roles}
    extra = {"unicode-cldr-core": cldr_pairs()} if (CLDR / "main" / "es.xml").exists() else {}
    firefox = CatalogStats()  # Firefox's Fluent strings, cleaned as the catalogs are
    archives = {package: fetch(package, cache, pattern) for package, pattern in ARCHIVES.items()}
    extra[ENGLISH] = list(
        dict.fromkeys(
            cleaned_pairs(firefox_pairs(archives[ENGLISH], archives[SPANISH]), firefox, ENGLISH)
        )
    )
    train, modern, stats = build_pairs(trees, roles, extra)
    stats.entries[ENGLISH] = firefox.entries.get(ENGLISH, 0)
    for reason, count in firefox.dropped.items():
        stats.dropped[reason] = stats.dropped.get(reason, 0) + count
    return train, modern, stats, extra


def build_catalog_data(out: Path, cache: Path = CACHE, roles: dict[str, str] = PACKAGES) -> dict:
    """Writes `catalogs.{es,en}` (training pairs), `synthetic.{es,en}` (back-translated
    fortunes, WordNet examples and Ding's sentences, models.backtranslation),
    `lexicon.{es,en}` (Apertium's dictionary words, models.lexicon), `phrases.{es,en}`
    (everyday patterns filled with them, models.phrasebook), `expressions.{es,en}` (everyday
    expressions with CLDR's country and language names, models.expressions),
    `test-modern.{es,en}` and `test-everyday.{es,en}` into `out`; returns the counts (also
    in `catalogs.json`)."""
    import json
    import shutil

    from models import backtranslation
    from models.cldr import CLDR, display_name_pairs
    from models.expressions import LANGUAGE_CODES, expression_pairs
    from models.lexicon import BILINGUAL, dictionary_entries
    from models.phrasebook import common_words, phrase_pairs

    out.mkdir(parents=True, exist_ok=True)
    train, modern, stats, extra = catalog_parts(cache, roles)
    _write(out, "catalogs", train)
    _write(out, "test-modern", modern)
    spanish, english = read_everyday()
    _write(out, "test-everyday", list(zip(spanish, english, strict=True)))
    held_out = {normalised(t) for pair in modern for t in pair}
    held_out |= {normalised(t) for t in spanish + english}
    synthetic: list[tuple[str, str]] = []
    sentences: list[str] = []  # real English prose
    if shutil.which("apertium"):  # back-translation: real English, Apertium's Spanish
        sentences = [
            s
            for package in backtranslation.FORTUNE_PACKAGES
            for s in backtranslation.fortune_sentences(
                fetch(package, cache, backtranslation.FORTUNES)
            )
        ]
        wordnet = fetch(backtranslation.WORDNET_PACKAGE, cache, backtranslation.WORDNET)
        sentences += backtranslation.wordnet_examples(wordnet)
        ding = fetch(backtranslation.DING_PACKAGE, cache, backtranslation.DING)
        sentences += backtranslation.ding_sentences(ding)
        sentences = [s for s in dict.fromkeys(sentences) if normalised(s) not in held_out]
        synthetic = backtranslation.synthetic_pairs(sentences)
    _write(out, "synthetic", synthetic)
    lexicon: list[tuple[str, str]] = []
    phrases: list[tuple[str, str]] = []
    if shutil.which("lt-print") and BILINGUAL.exists():  # Apertium's dictionary words
        entries = dictionary_entries()
        # the catalogs' Spanish, real English prose and Apertium's Spanish for that prose
        frequency = common_words([s for s, _ in train] + sentences + [s for s, _ in synthetic])
        lexicon = [(e.spanish, e.english) for e in entries]  # word_pairs of the same entries
        phrases = phrase_pairs(entries, frequency)
    expressions: list[tuple[str, str]] = []
    if (CLDR / "main" / "es.xml").exists():
        countries = display_name_pairs("territories/territory")
        languages = display_name_pairs("languages/language", LANGUAGE_CODES)
        expressions = expression_pairs(countries, languages)
    lexicon, phrases, expressions = (
        [p for p in dict.fromkeys(pairs) if not {normalised(t) for t in p} & held_out]
        for pairs in (lexicon, phrases, expressions)
    )
    _write(out, "lexicon", lexicon)
    _write(out, "phrases", phrases)
    _write(out, "expressions", expressions)
    counts = {
        "train_pairs": len(train),
        "synthetic_pairs": len(synthetic),
        "lexicon_pairs": len(lexicon),
        "phrase_pairs": len(phrases),
        "expression_pairs": len(expressions),
        "modern_pairs": len(modern),
        "everyday_pairs": len(spanish),
        "packages": {
            p: {
                "role": roles.get(p, "train"),
                "entries": stats.entries.get(p, 0),
                "kept": stats.kept.get(p, 0),
            }
            for p in sorted({*roles, *extra})
        },
        "dropped": stats.dropped,
    }
    (out / "catalogs.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")
    return counts
