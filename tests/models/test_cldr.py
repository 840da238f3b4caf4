"""Spanish-English pairs from Unicode CLDR: a tree written here, and the installed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.catalogs import build_pairs
from models.cldr import CLDR, cldr_pairs

MAIN = """<ldml><localeDisplayNames>
<languages><language type="de">{de}</language>
<language type="de" alt="short">x</language></languages>
<territories><territory type="CA">{ca}</territory>
<territory type="ZZ" draft="unconfirmed">y</territory></territories>
</localeDisplayNames>
<dates><calendars><calendar type="gregorian">
<months><monthContext type="format"><monthWidth type="wide">
<month type="1">{jan}</month></monthWidth></monthContext></months>
</calendar></calendars>
<fields><field type="day"><relative type="-1">{yesterday}</relative>
<relativeTime type="past"><relativeTimePattern count="other">{ago}</relativeTimePattern>
</relativeTime></field>
<field type="day-short"><relative type="-1">short</relative></field></fields></dates>
<units><unitLength type="long"><unit type="length-kilometer">
<unitPattern count="one">{km1}</unitPattern><unitPattern count="other">{km}</unitPattern>
<unitPattern count="other" case="genitive">z</unitPattern></unit>
<unit type="speed-odd"><unitPattern count="other">{odd}</unitPattern></unit></unitLength></units>
</ldml>"""
ANNOTATIONS = """<ldml><annotations><annotation cp="🍎" type="tts">{apple}</annotation>
<annotation cp="🍎">{apple} | fruta</annotation></annotations></ldml>"""
TEXTS = {
    "es": dict(
        de="alemán",
        ca="Canadá",
        jan="enero",
        yesterday="ayer",
        ago="hace {0} días",
        km1="{0} kilómetro",
        km="{0} kilómetros",
        odd="{1} por {0}",
        apple="manzana roja",
    ),
    "en": dict(
        de="German",
        ca="Canada",
        jan="January",
        yesterday="yesterday",
        ago="{0} days ago",
        km1="{0} kilometer",
        km="{0} kilometers",
        odd="{0} per {1}",
        apple="red apple",
    ),
}


def _tree(root: Path) -> Path:
    for language, texts in TEXTS.items():
        for part, template in (("main", MAIN), ("annotations", ANNOTATIONS)):
            path = root / part / f"{language}.xml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(template.format(**texts), encoding="utf-8")
    return root


def test_pairs_come_from_the_same_key_in_both_locales(tmp_path):
    pairs = set(cldr_pairs(_tree(tmp_path)))
    assert pairs == {
        ("alemán", "German"),
        ("Canadá", "Canada"),
        ("enero", "January"),
        ("ayer", "yesterday"),
        ("hace 3 días", "3 days ago"),
        ("1 kilómetro", "1 kilometer"),
        ("3 kilómetros", "3 kilometers"),
        ("manzana roja", "red apple"),
    }  # no alt, draft, short field, case form, or second placeholder


def test_cldr_pairs_join_the_training_pairs(tmp_path):
    pairs = cldr_pairs(_tree(tmp_path))
    train, modern, stats = build_pairs({}, {}, {"unicode-cldr-core": pairs})
    assert train == pairs and modern == [] and stats.kept["unicode-cldr-core"] == len(pairs)


@pytest.mark.skipif(not (CLDR / "main" / "es.xml").exists(), reason="unicode-cldr-core")
def test_the_installed_cldr_gives_everyday_words():
    pairs = set(cldr_pairs())
    assert len(pairs) > 2000
    for pair in [
        ("Canadá", "Canada"),
        ("ayer", "yesterday"),
        ("enero", "January"),
        ("3 kilómetros", "3 kilometers"),
        ("manzana roja", "red apple"),
    ]:
        assert pair in pairs
