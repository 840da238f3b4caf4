"""Hugging Face models served beside our own translator by one live server: a Marian, an
M2M100, an NLLB and an mBART-50 model (small random ones, exported and certified by the
session), each answering by its name and by languages (NLLB's FLORES-200 codes, mBART-50's
and ISO 639-1's); the
served translations equal `generate`'s; the translator's features work for them unchanged;
languages they lack are refused."""

from __future__ import annotations

import grpc
import httpx
import pytest
import torch
from helpers import certificate_texts
from servers import Server, rpc_error

from export.hf.version import language_id, load
from service.wire.v1 import decoding_pb2, translation_pb2

pytestmark = pytest.mark.slow
COUNT = 200  # texts compared with generate through the server (the certificate's)


@pytest.fixture(scope="module")
def mixed_server(mixed_repository, tmp_path_factory):
    server = Server(
        mixed_repository, tmp_path_factory.mktemp("mixed"), "--workers", "1",
        "--default-translator", "translator", "--response-cache-entries", "0",
        "--http-listen", "127.0.0.1:0",
    )  # fmt: skip
    server.wait()
    yield server
    server.stop()


def generated_texts(directory, texts, source, target) -> list[str]:
    """`generate`'s greedy translations, as long as the model allows (no length bound), their
    ends stripped."""
    model, tokenizer = load(directory)
    forced = {}
    if source:
        tokenizer.src_lang = source
        forced = {"forced_bos_token_id": language_id(tokenizer, target)}
    translated = []
    for start in range(0, len(texts), 50):
        batch = tokenizer(texts[start : start + 50], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**batch, num_beams=1, do_sample=False, max_length=64, **forced)
        # the server strips a text's ends: NLLB's tokenizer keeps the spaces that word-start
        # pieces alone leave there
        translated += [t.strip() for t in tokenizer.batch_decode(out, skip_special_tokens=True)]
    return translated


def translate(server, options=None, **fields) -> translation_pb2.TranslateResponse:
    """Each text one input, generate's length (no bound relative to the input) unless
    `options` say otherwise."""
    if options is None:
        options = decoding_pb2.DecodingOptions(max_length=63, max_length_ratio=0.0)
    request = translation_pb2.TranslateRequest(options=options, **fields)
    request.sentence_splitting = translation_pb2.SENTENCE_SPLITTING_NONE
    return server.stub.Translate(request, timeout=120)


@pytest.mark.parametrize(
    "family, languages, used",
    [
        ("marian", ("", ""), ("es", "de")),
        ("m2m100", ("es", "en"), ("es", "en")),
        ("nllb", ("spa_Latn", "eng_Latn"), ("spa_Latn", "eng_Latn")),
        ("mbart", ("es_XX", "en_XX"), ("es_XX", "en_XX")),
    ],
)
def test_served_translations_are_generates(mixed_server, hf_models, family, languages, used):
    directory, version, certificate = hf_models[family]
    texts = certificate_texts(version, COUNT)
    source, target = languages
    response = translate(
        mixed_server, model=family, texts=texts, source_language=source, target_language=target
    )
    served = [t.hypotheses[0].text for t in response.translations]
    expected = generated_texts(directory, texts, source, target)
    differing = [i for i, (a, b) in enumerate(zip(served, expected, strict=True)) if a != b]
    assert set(differing) <= set(certificate["decodes"][0]["near_ties"])  # where either wins
    assert (response.model, response.source_language, response.target_language) == (
        family, *used,
    )  # fmt: skip
    assert len(set(served)) > COUNT // 2  # the outputs follow the sources


def test_a_request_naming_only_languages_reaches_the_model_that_covers_them(mixed_server):
    ours = translate(mixed_server, texts=["Hola."], source_language="es", target_language="en")
    assert ours.model == "translator"  # es->en: the most specialised, and the default
    german = translate(mixed_server, texts=["Hola."], source_language="es", target_language="de")
    assert german.model == "marian"  # one pair: more specialised than M2M100's 100 languages
    french = translate(mixed_server, texts=["Hola."], source_language="es", target_language="fr")
    assert (french.model, french.target_language) == ("mbart", "fr_XX")  # 52 before 100
    catalan = translate(mixed_server, texts=["Hola."], source_language="es", target_language="ca")
    assert (catalan.model, catalan.target_language) == ("m2m100", "ca")  # M2M100's alone
    detected = translate(mixed_server, texts=["Buenos días, ¿cómo está usted?"],
                         target_language="ca")  # fmt: skip
    assert detected.model == "m2m100" and detected.source_language == "es"
    default = translate(mixed_server, texts=["Hola."])
    assert default.model == "translator"


@pytest.mark.parametrize(
    "model, own, iso, http",
    [  # traditional Chinese is NLLB's alone here, Telugu mBART-50's
        ("nllb", ("spa_Latn", "zho_Hant"), ("es", "zt"), "zh-TW"),
        ("mbart", ("es_XX", "te_IN"), ("es", "te"), "te"),
    ],
)
def test_iso_codes_reach_a_model_by_its_own_codes(mixed_server, model, own, iso, http):
    """A pair one model alone serves, named by ISO 639-1 codes (LibreTranslate's) over gRPC
    and HTTP, reaches it with its own codes; the edge lists its languages by the ISO ones."""
    options = decoding_pb2.DecodingOptions()
    ours = translate(mixed_server, model=model, texts=["Hola."], source_language=own[0],
                     target_language=own[1], options=options)  # fmt: skip
    named = translate(mixed_server, texts=["Hola."], source_language=iso[0],
                      target_language=iso[1], options=options)  # fmt: skip
    assert (named.model, named.source_language, named.target_language) == (model, *own)
    text = ours.translations[0].hypotheses[0].text
    assert named.translations[0].hypotheses[0].text == text
    with httpx.Client(base_url=mixed_server.http_url, timeout=60) as web:
        languages = {entry["code"]: entry["targets"] for entry in web.get("/languages").json()}
        assert iso[1] in languages["es"] and own[1] not in languages
        answer = web.post("/translate", json={"q": "Hola.", "source": "es", "target": http})
        assert answer.status_code == 200, answer.text
        assert answer.json()["translatedText"] == text


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"model": "m2m100", "target_language": "xx"}, "'xx' is not written by m2m100/1"),
        ({"model": "m2m100"}, "m2m100/1 writes 100 languages; name one"),
        ({"model": "translator", "target_language": "fr"}, "'fr' is not written"),
        ({"model": "marian", "source_language": "de"}, "'de' is not read by marian/1"),
        ({"source_language": "tlh", "target_language": "en"}, "no served model translates"),
    ],
)
def test_a_language_a_model_lacks_is_invalid(mixed_server, fields, says):
    error = rpc_error(lambda: translate(mixed_server, texts=["Hola."], **fields))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in error.details()


def test_the_translators_features_work_for_them(mixed_server):
    stub = mixed_server.stub
    html = translate(
        mixed_server, model="m2m100", texts=["<p>Hola <b>amigo</b>.</p>"],
        source_language="es", target_language="en", text_format=translation_pb2.TEXT_FORMAT_HTML,
    )  # fmt: skip
    text = html.translations[0].hypotheses[0].text
    tags = ["<p>", "<b>", "</b>", "</p>"]  # every tag back, in order (a random model drops
    places = [text.find(tag) for tag in tags]  # the markers, so they close the text)
    assert -1 not in places and places == sorted(places)
    request = translation_pb2.TranslateStreamRequest(
        model="marian", text="El perro come pan.",
        options=decoding_pb2.DecodingOptions(max_length=63, max_length_ratio=0.0),
    )  # fmt: skip
    streamed = list(stub.TranslateStream(request, timeout=60))
    unary = translate(mixed_server, model="marian", texts=["El perro come pan."])
    assert streamed[-1].result.translations[0].hypotheses[0].text == (
        unary.translations[0].hypotheses[0].text
    )
    document = translate(
        mixed_server, model="marian", texts=["El perro come pan.\n\nLa casa es grande."],
        options=decoding_pb2.DecodingOptions(max_length=63),
    )  # fmt: skip
    request = translation_pb2.TranslateRequest(
        model="marian", texts=["El perro come pan.\n\nLa casa es grande."]
    )
    whole = stub.Translate(request, timeout=60).translations[0]
    assert len(whole.sentences) == 2 and "\n\n" in whole.hypotheses[0].text
    assert document.translations[0].hypotheses  # one input, not split
    beam = translate(  # the loop cut off: a random model's loops would cut both alike
        mixed_server, model="marian", texts=["El perro come pan."],
        options=decoding_pb2.DecodingOptions(
            beam_size=4, num_hypotheses=2, max_length=63, max_length_ratio=0.0
        ),
    )  # fmt: skip
    best, second = beam.translations[0].hypotheses
    assert best.score >= second.score and list(best.tokens) != list(second.tokens)
    scored = stub.Score(
        translation_pb2.ScoreRequest(
            model="m2m100", source_language="es", target_language="en",
            pairs=[translation_pb2.ScorePair(source="Hola.", target="Hello.")],
        ),
        timeout=60,
    )  # fmt: skip
    (score,) = scored.scores
    assert score.tokens[-1] == "</s>" and not score.tokens[0].startswith("__")
    assert score.log_prob == pytest.approx(sum(score.token_log_probs), abs=1e-4)
    assert score.log_prob < 0


def test_a_glossary_takes_the_plurals_of_the_request_s_languages(mixed_server):
    """M2M100 from French to German: the term is found as written, its German target never
    written in an English plural ("Passworts"); from Spanish to English the plural is found
    and written in English. A random model drops markers: they come back at the end."""
    glossary = [translation_pb2.GlossaryEntry(source="mot de passe", target="Passwort")]
    (german,) = translate(
        mixed_server, model="m2m100", texts=["Le mot de passe et les mots de passe."],
        source_language="fr", target_language="de", glossary=glossary,
    ).translations  # fmt: skip
    assert list(german.glossary_applied) == [0]
    assert "Passwort" in german.hypotheses[0].text
    assert "Passworts" not in german.hypotheses[0].text
    glossary = [translation_pb2.GlossaryEntry(source="contraseña", target="passphrase")]
    (english,) = translate(
        mixed_server, model="m2m100", texts=["Las contraseñas."], source_language="es",
        target_language="en", glossary=glossary,
    ).translations  # fmt: skip
    assert "passphrases" in english.hypotheses[0].text.lower()


def test_libretranslate_routes_a_pair_to_the_model_that_serves_it(mixed_server):
    with httpx.Client(base_url=mixed_server.http_url, timeout=60) as web:
        languages = {entry["code"]: entry["targets"] for entry in web.get("/languages").json()}
        assert "ca" in languages["es"] and "en" in languages["es"]
        answer = web.post("/translate", json={"q": "Hola.", "source": "es", "target": "ca"})
        assert answer.status_code == 200
        grpc_answer = translate(
            mixed_server, model="m2m100", texts=["Hola."], source_language="es",
            target_language="ca", options=decoding_pb2.DecodingOptions(),
        )  # fmt: skip
        assert answer.json()["translatedText"] == grpc_answer.translations[0].hypotheses[0].text


def test_the_command_line_names_languages(mixed_server):
    """`attnserve translate --target-language` reaches the model covering the pair."""
    import json
    import subprocess
    import sys

    command = [sys.executable, "-m", "attnserve.cli", "translate", "--server",
               mixed_server.address, "--source-language", "es", "--target-language", "ca",
               "--json", "Hola."]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    answer = json.loads(done.stdout)
    assert answer["model"] == "m2m100", answer
