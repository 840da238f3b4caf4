"""bench.peers without LibreTranslate: the Argos package built from the shipped translator has
the layout argos-translate-lt loads, LibreTranslate's settings keep every fetch local, and the
report's ratios and goals are computed right from given figures."""

from __future__ import annotations

import json
import zipfile

import pytest

from bench.peers import libre, package
from bench.peers.report import (
    GRPC,
    HTTP,
    LIBRE,
    goals,
    kept_by_case,
    kept_where_kept,
    markdown,
)


def test_the_package_of_the_shipped_translator_has_argos_layout(tmp_path):
    pytest.importorskip("ctranslate2")
    pytest.importorskip("torch")
    from models.shipped import SHIPPED_TRANSLATOR

    root = package.build(SHIPPED_TRANSLATOR, tmp_path / "packages", venv_python=None)
    assert root.name == package.TRANSLATE
    assert package.problems(root, splitter=False) == []
    assert package.problems(root)[0].startswith("spacy/")  # no venv: no splitter written
    metadata = json.loads((root / "metadata.json").read_text())
    assert (metadata["from_code"], metadata["to_code"]) == ("es", "en")
    assert metadata["type"] == "translate"
    assert metadata["quantization"] == "int8"
    config = json.loads((root / "model" / "config.json").read_text())
    assert config["add_source_eos"] is True
    tokenizer = (SHIPPED_TRANSLATOR / "tokenizer.model").read_bytes()
    assert (root / "sentencepiece.model").read_bytes() == tokenizer
    # the second package, which keeps LibreTranslate's start-up from fetching models
    splitter = json.loads((tmp_path / "packages" / package.SPLITTER / "metadata.json").read_text())
    assert splitter["type"] == "sbd"
    archive = package.archive(root, tmp_path / "es_en.argosmodel")
    with zipfile.ZipFile(archive) as zipped:
        names = set(zipped.namelist())
    assert f"{package.TRANSLATE}/metadata.json" in names
    assert f"{package.TRANSLATE}/model/model.bin" in names
    assert f"{package.TRANSLATE}/sentencepiece.model" in names


def test_problems_names_what_is_missing(tmp_path):
    assert package.problems(tmp_path) == ["metadata.json: missing"]
    (tmp_path / "metadata.json").write_text(json.dumps({"from_code": "es", "type": "sbd"}))
    found = package.problems(tmp_path)
    assert "metadata.json: no to_code" in found
    assert "metadata.json: type 'sbd', not 'translate'" in found
    assert "model/model.bin: missing" in found
    assert "sentencepiece.model: missing" in found


def test_libretranslate_settings_keep_every_fetch_local(tmp_path):
    env = libre.environment(tmp_path)
    assert env["ARGOS_PACKAGE_INDEX"].startswith("file://")
    assert env["ARGOS_PACKAGES_DIR"] == str(tmp_path / "packages")
    assert env["ARGOS_CHUNK_TYPE"] == "SPACY"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[name].startswith("http://127.0.0.1:")
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HOME"):
        assert env[name].startswith(str(tmp_path))
    assert "--load-only" in libre.FLAGS and "es,en" in libre.FLAGS


def _figures() -> dict:
    def row(rate, p50, p99):
        return {"sentences_per_s": rate, "p50_ms": p50, "p99_ms": p99, "failed": 0}

    return {
        "levels": {
            LIBRE: {"1": row(20.0, 50.0, 150.0), "64": row(10.0, 4000.0, 7000.0)},
            HTTP: {"1": row(40.0, 20.0, 60.0), "64": row(120.0, 500.0, 1000.0)},
            GRPC: {"1": row(45.0, 18.0, 50.0), "64": row(125.0, 480.0, 900.0)},
        },
        "document": {
            LIBRE: {"characters": 60000, "sentences": 500, "seconds": 70.0},
            HTTP: {"characters": 60000, "sentences": 500, "seconds": 14.0},
        },
        "bleu": {"bible": {LIBRE: 30.0, HTTP: 30.5}, "everyday": {LIBRE: 66.0, HTTP: 65.5}},
        "kept": {"protected items": 0.995, "HTML tags and entities": 0.98},
    }


def test_goals_are_the_ratios_of_the_figures():
    found = {g["goal"]: g for g in goals(_figures())}
    assert found["64 clients: attnserve-HTTP / LibreTranslate sentences/s"]["figure"] == 12.0
    assert found["64 clients: attnserve-HTTP / LibreTranslate sentences/s"]["status"] == "met"
    assert found["64 clients: attnserve-HTTP / LibreTranslate p99"]["figure"] == pytest.approx(
        0.143
    )
    assert found["64 clients: attnserve-HTTP / LibreTranslate p99"]["status"] == "met"
    assert found["1 client: attnserve-HTTP / LibreTranslate p50"]["figure"] == 0.4
    assert found["1 client: attnserve-HTTP / LibreTranslate p50"]["status"] == "met"
    document = found["60,000-character document: LibreTranslate / attnserve-HTTP seconds"]
    assert (document["figure"], document["status"]) == (5.0, "missed")
    assert found["BLEU bible: attnserve-HTTP - LibreTranslate"]["figure"] == 0.5
    assert found["BLEU everyday: attnserve-HTTP - LibreTranslate"]["status"] == "missed"
    assert found["protected items LibreTranslate keeps, kept by attnserve-HTTP"]["status"] == "met"
    html = found["HTML tags and entities LibreTranslate keeps, kept by attnserve-HTTP"]
    assert html["status"] == "missed"
    grpc = found["64 clients: HTTP / gRPC sentences/s"]
    assert (grpc["figure"], grpc["status"]) == (0.96, "met")


def test_a_goal_without_its_figures_is_not_measured():
    figures = _figures()
    del figures["levels"][GRPC]
    found = {g["goal"]: g for g in goals(figures)}
    assert found["64 clients: HTTP / gRPC sentences/s"]["status"] == "not measured"
    assert "| 64 clients: HTTP / gRPC sentences/s |  | >= 0.9 | not measured |" in markdown(figures)


def test_kept_where_libretranslate_kept():
    cases = [("a {0} b", ["{0}"]), ("x 😺 y `ls` z", ["😺", "`ls`"]), ("<b>c</b>", ["<b>", "</b>"])]
    ours = kept_by_case(cases, ["a {0} b", "x 😺 y ls z", "<b>C</b>"])
    theirs = kept_by_case(cases, ["a { 0 } b", "x 😺 y `ls` z", "<b>C"])
    assert ours == [[True], [True, False], [True, True]]
    assert theirs == [[False], [True, True], [True, False]]
    # LibreTranslate kept 😺, `ls` and <b>; attnserve kept 2 of those 3
    assert kept_where_kept(ours, theirs) == pytest.approx(0.6667)
    assert kept_where_kept([[False]], [[False]]) is None
