"""Firefox's Fluent strings paired by file, message and attribute (models.fluent)."""

from __future__ import annotations

import zipfile

from models.fluent import firefox_pairs, messages

BRAND_EN = "-brand-short-name = Firefox\n"
BRAND_ES = "-brand-short-name = Firefox\n"
ENGLISH = """# A comment
close-button = Close the window
    .tooltiptext = Close { -brand-short-name }
    .accesskey = C
downloads = { $count ->
    [one] One download
   *[other] { $count } downloads
}
long-text =
    The file could not be saved
    because the disk is full.
only-english = Nothing in Spanish
"""
SPANISH = """close-button = Cerrar la ventana
    .tooltiptext = Cerrar { -brand-short-name }
    .accesskey = r
downloads = { $count ->
    [one] Una descarga
   *[other] { $count } descargas
}
long-text =
    No se pudo guardar el archivo
    porque el disco está lleno.
"""


def test_a_message_with_attributes_and_continued_lines():
    assert messages(ENGLISH)["close-button.tooltiptext"] == "Close { -brand-short-name }"
    assert messages(ENGLISH)["long-text"] == "The file could not be saved because the disk is full."


def test_the_two_locales_pair_by_file_message_and_attribute(tmp_path):
    english = tmp_path / "en" / "usr" / "lib" / "firefox-esr" / "browser"
    english.mkdir(parents=True)
    with zipfile.ZipFile(english / "omni.ja", "w") as z:
        z.writestr("localization/en-US/branding/brand.ftl", BRAND_EN)
        z.writestr("localization/en-US/browser/window.ftl", ENGLISH)
    spanish = tmp_path / "es"
    spanish.mkdir()
    with zipfile.ZipFile(spanish / "langpack-es-ES.xpi", "w") as z:
        z.writestr("browser/localization/es-ES/branding/brand.ftl", BRAND_ES)
        z.writestr("browser/localization/es-ES/browser/window.ftl", SPANISH)
    assert firefox_pairs(tmp_path / "en", spanish) == [
        ("Cerrar la ventana", "Close the window"),
        ("Cerrar Firefox", "Close Firefox"),
        (
            "No se pudo guardar el archivo porque el disco está lleno.",
            "The file could not be saved because the disk is full.",
        ),
    ]  # no access key, no selector, no message of one locale only
