"""Languages at the edge (service.runtime.languages): names, a manifest's declared pairs, and
the identifier choosing among the languages served."""

from __future__ import annotations

from service.runtime import languages
from service.runtime.languages import Languages, detect


def test_a_manifest_declares_what_a_model_reads_and_writes():
    declared = Languages.from_manifest(
        {"languages": {"source": ["es", "fr"], "target": ["en", "fr"]}}
    )
    assert declared.pairs() == [("es", "en"), ("es", "fr"), ("fr", "en")]
    assert Languages.from_manifest({}) == Languages()  # a manifest that declares none
    assert Languages().pairs() == []


def test_names_fall_back_to_the_code():
    assert languages.name("es") == "Spanish"
    assert languages.name("xx") == "xx"


def test_detection_chooses_among_the_languages_served():
    ranked = detect("¿Dónde está la estación de tren? Quiero comprar un billete.", ["en", "es"])
    assert [code for code, _ in ranked] == ["es", "en"]
    assert ranked[0][1] > 0.9 and abs(sum(p for _, p in ranked) - 1) < 1e-6
    assert detect("Where is the train station? I want a ticket.", ["en", "es"])[0][0] == "en"
    # one language served: no guess needed; none the identifier knows: the first, unsure
    assert detect("whatever", ["es"]) == [("es", 1.0)]
    assert detect("whatever", ["xx", "yy"]) == [("xx", 0.0)]
    assert detect("whatever", []) == []
