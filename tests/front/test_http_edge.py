"""The pieces of the HTTP way in that need no server (service.front.http): statuses, the
deadline header, paths and form fields of the contract's methods, the OpenAPI document,
LibreTranslate's request messages, and the listening socket."""

from __future__ import annotations

import asyncio
import socket

import grpc
import pytest
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request

from service.front.http import app, calls, contract, libretranslate, openapi
from service.front.http.calls import Aborted, HttpContext
from service.front.security import parse_tokens
from service.runtime.errors import Unavailable
from service.wire.v1 import caption_pb2, translation_pb2


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw})


def test_every_grpc_status_has_an_http_status_and_errors_name_it():
    assert set(calls.HTTP_STATUS) == set(grpc.StatusCode)
    answer = calls.error_response(grpc.StatusCode.RESOURCE_EXHAUSTED, "texts[0]: too long")
    assert answer.status_code == 429
    assert answer.body == (
        b'{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"texts[0]: too long"}}'
    )


def test_the_timeout_header_is_the_deadline():
    assert calls.timeout_of(request({})) is None
    assert calls.timeout_of(request({"X-Request-Timeout": "2.5"})) == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        with pytest.raises(Aborted) as refused:
            calls.timeout_of(request({"x-request-timeout": bad}))
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    context = HttpContext(10.0)
    assert 9.0 < context.time_remaining() <= 10.0
    assert HttpContext(None).time_remaining() is None
    with pytest.raises(Aborted):
        asyncio.run(context.abort(grpc.StatusCode.NOT_FOUND, "model: no model named 'x'"))


def test_a_call_past_its_deadline_is_cancelled_as_deadline_exceeded():
    cancelled = []

    async def slow():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(Aborted) as late:
        asyncio.run(calls.within(HttpContext(0.01), slow()))
    assert late.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and cancelled == [True]


def test_tokens_refuse_over_http_as_over_grpc():
    tokens = parse_tokens("a-token-of-sixteen-chars;captions-only-token-0 caption", "test")
    refused = []
    calls.authorize([], None, "attnserve.v1.TranslationService", refused.append)  # tokens off
    with pytest.raises(Aborted) as none:
        calls.authorize(tokens, None, "attnserve.v1.TranslationService", refused.append)
    assert none.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "Authorization: Bearer" in none.value.details
    with pytest.raises(Aborted) as scope:
        calls.authorize(
            tokens, "captions-only-token-0", "attnserve.v1.TranslationService", refused.append
        )
    assert scope.value.code == grpc.StatusCode.PERMISSION_DENIED
    calls.authorize(
        tokens, "a-token-of-sixteen-chars", "attnserve.v1.TranslationService", refused.append
    )
    assert refused == [grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED]
    assert calls.header_token(request({"Authorization": "Bearer abc "})) == "abc"
    assert calls.header_token(request({"Authorization": "Basic abc"})) is None


def test_method_paths():
    assert contract.method_path("Translate") == "/v1/translate"
    assert contract.method_path("TranslateStream") == "/v1/translate:stream"
    assert contract.method_path("CaptionStream") == "/v1/caption:stream"
    assert contract.method_path("DetectLanguage") == "/v1/detect_language"


def test_a_form_becomes_the_message_a_json_body_would():
    upload = UploadFile(file=__import__("io").BytesIO(b"\x89PNG..."), filename="a.png")
    form = FormData(
        [
            ("images", upload),
            ("returnAttention", "true"),
            ("options", '{"beamSize": 2}'),
            ("model", "m"),
        ]
    )
    fields = asyncio.run(contract.form_fields(form, caption_pb2.CaptionRequest.DESCRIPTOR))
    message = contract.json_format.ParseDict(fields, caption_pb2.CaptionRequest())
    assert message.images == [b"\x89PNG..."]
    assert message.return_attention and message.options.beam_size == 2 and message.model == "m"
    texts = FormData([("texts", "uno"), ("texts", "dos"), ("text_format", "TEXT_FORMAT_HTML")])
    fields = asyncio.run(contract.form_fields(texts, translation_pb2.TranslateRequest.DESCRIPTOR))
    message = contract.json_format.ParseDict(fields, translation_pb2.TranslateRequest())
    assert list(message.texts) == ["uno", "dos"]
    assert message.text_format == translation_pb2.TEXT_FORMAT_HTML
    with pytest.raises(Aborted, match="nothing: no such field"):
        asyncio.run(
            contract.form_fields(
                FormData([("nothing", "x")]), caption_pb2.CaptionRequest.DESCRIPTOR
            )
        )
    for word, meant in (("on", True), ("Yes", True), ("1", True), ("false", False), ("", False)):
        flag = FormData([("returnAttention", word)])
        fields = asyncio.run(contract.form_fields(flag, caption_pb2.CaptionRequest.DESCRIPTOR))
        assert fields == {"return_attention": meant}, word
    for word in ("maybe", "2", "ture"):
        flag = FormData([("return_attention", word)])
        with pytest.raises(
            Aborted, match=f"return_attention: true or false expected, got '{word}'"
        ):
            asyncio.run(contract.form_fields(flag, caption_pb2.CaptionRequest.DESCRIPTOR))


def test_the_document_follows_the_descriptors():
    schemas: dict = {}
    reference = openapi.message_schemas(translation_pb2.TranslateRequest.DESCRIPTOR, schemas)
    assert reference == {"$ref": "#/components/schemas/attnserve.v1.TranslateRequest"}
    request_schema = schemas["attnserve.v1.TranslateRequest"]["properties"]
    assert set(request_schema) == {
        f.json_name for f in translation_pb2.TranslateRequest.DESCRIPTOR.fields
    }
    assert request_schema["utf8Texts"] == {
        "type": "array",
        "items": {"type": "string", "format": "byte"},
    }
    assert "TEXT_FORMAT_HTML" in request_schema["textFormat"]["enum"]
    assert "attnserve.v1.DecodingOptions" in schemas  # what the request refers to


def test_libretranslate_requests_are_translate_messages():
    plain = libretranslate._translate_message("translator", ["Hola"], "text", 0)
    assert plain.model == "translator" and list(plain.texts) == ["Hola"]
    assert not plain.HasField("options") and plain.text_format == 0
    html = libretranslate._translate_message("m", ["<b>Hola</b>"], "html", 2)
    assert html.text_format == translation_pb2.TEXT_FORMAT_HTML
    assert html.options.num_hypotheses == 3 and html.options.beam_size == 4
    answer = libretranslate.refusal(Aborted(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy"))
    assert answer.status_code == 429 and answer.body == b'{"error":"Slowdown: busy"}'
    assert libretranslate.refusal(Aborted(grpc.StatusCode.INTERNAL, "x")).status_code == 500


def test_the_http_socket_listens_and_may_share_its_port():
    first = app.http_socket("127.0.0.1:0", reuse_port=True)
    try:
        port = first.getsockname()[1]
        second = app.http_socket(f"127.0.0.1:{port}", reuse_port=True)
        second.close()
        busy = f"127.0.0.1:{port}"  # a refusal naming the setting, not an OSError's traceback
        with pytest.raises(Unavailable, match=rf"^http_listen {busy}: cannot listen there \("):
            app.http_socket(busy, reuse_port=False).close()
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            first.setblocking(True)
            accepted, _ = first.accept()
            with accepted:  # a response's body does not wait for the client's delayed ACK
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        first.close()


def test_a_pair_goes_to_the_translator_that_declares_it():
    from types import SimpleNamespace

    from service.runtime.languages import Languages

    def model(source, target):
        return {"1": SimpleNamespace(languages=Languages(source, target))}

    service = "attnserve.v1.TranslationService"
    front = SimpleNamespace(
        models={service: {"a": model(("es",), ("en",)), "b": model(("fr", "es"), ("de", "en"))}},
        defaults={service: "b"},
    )
    api = libretranslate.LibreTranslateApi(
        front, SimpleNamespace(service=service), [], None, None, 0
    )
    pair = libretranslate.Pair
    assert api._route("es", "en", ["Hola"]) == (pair("b", "es", "en"), "es", 100.0)  # default
    assert api._route("fr", "de", ["Bonjour"]) == (pair("b", "fr", "de"), "fr", 100.0)
    assert api._route("auto", "de", ["Bonjour tout le monde, comment allez-vous ?"])[:2] == (
        pair("b", "fr", "de"),
        "fr",
    )
    # in any case, with a region
    assert api._route("ES", "en-US", ["Hola"])[:2] == (pair("b", "es", "en"), "es")
    for source, target, message in (
        ("it", "en", "it is not supported"),
        ("es", "ja", "ja is not supported"),
        ("de", "en", r"English \(en\) is not available as a target language from German"),
    ):
        with pytest.raises(libretranslate.BadRequest, match=message):
            api._route(source, target, ["x"])
    # a served language to itself: no model, the texts come back as they are
    assert api._route("de", "de", ["Hallo"]) == (None, "de", 100.0)
    english = api._route("auto", "en", ["Where is the train station, please?"])
    assert english.pair is None and english.source == "en"
    page = (  # its markup reads as English: an HTML text is detected by its text alone
        '<!DOCTYPE html><html lang="es"><head><meta charset="utf-8"><meta name="viewport" '
        'content="width=device-width, initial-scale=1"><link rel="stylesheet" href="style.css">'
        '<title>Inicio</title></head><body><div class="container"><p>El perro come pan.</p>'
        "</div></body></html>"
    )
    assert api._route("auto", "en", [page]).source == "en"  # read as a plain text
    styled = page.replace("</head>", "<style>" + "body{margin:0}" * 200 + "</style></head>")
    assert api._route("auto", "en", [styled], "html").source == "es"  # its words, not its head
    assert api._route("auto", "en", [page], "html").source == "es"
    front.models[service]["c"] = model(("it",), ("ja",))
    with pytest.raises(libretranslate.BadRequest) as missing:
        api._route("it", "de", ["Ciao"])
    assert (
        str(missing.value) == "German (de) is not available as a target language from Italian (it)"
    )


def test_nllb_codes_are_named_as_libretranslate_names_them():
    """A model's FLORES-200 codes (NLLB's `spa_Latn`) are ISO 639-1 at the edge; its own
    codes are taken too, and `zh-Hant` is LibreTranslate's `zt`."""
    from types import SimpleNamespace

    from service.runtime.languages import Languages

    service = "attnserve.v1.TranslationService"
    nllb = Languages(("spa_Latn", "fra_Latn", "zho_Hant"), ("eng_Latn", "zho_Hant"))
    front = SimpleNamespace(
        models={service: {"nllb": {"1": SimpleNamespace(languages=nllb)}}},
        defaults={service: "nllb"},
    )
    api = libretranslate.LibreTranslateApi(
        front, SimpleNamespace(service=service), [], None, None, 0
    )
    assert set(api._pairs()) == {("es", "en"), ("fr", "en"), ("zt", "en"), ("es", "zt"),
                                 ("fr", "zt")}  # fmt: skip
    spanish = libretranslate.Pair("nllb", "spa_Latn", "eng_Latn")
    assert api._route("es", "en", ["Hola"]) == (spanish, "es", 100.0)
    assert api._route("spa_latn", "ENG_Latn", ["Hola"]) == (spanish, "es", 100.0)
    assert api._route("fr", "zh-Hant", ["Salut"]).pair == ("nllb", "fra_Latn", "zho_Hant")
    detected = api._route("auto", "en", ["Bonjour tout le monde, comment allez-vous ?"])
    assert detected.pair == ("nllb", "fra_Latn", "eng_Latn") and detected.source == "fr"
    with pytest.raises(libretranslate.BadRequest, match="de is not supported"):
        api._route("de", "en", ["Hallo"])


def test_the_files_folder_is_the_configured_one_or_a_new_one(tmp_path):
    from service.front import server
    from service.front.config import ServerConfig

    chosen = tmp_path / "translated" / "files"
    assert server.http_files(ServerConfig(http_files=chosen)) == chosen and chosen.is_dir()
    made = [server.http_files(ServerConfig()) for _ in range(2)]
    try:
        assert all(m.is_dir() and m.name.startswith("attnserve-files-") for m in made)
        assert made[0] != made[1]  # one of its own each server
    finally:
        for folder in made:
            folder.rmdir()


def test_translated_files_are_kept_for_their_download_then_deleted(tmp_path):
    import os
    import time

    old, new = tmp_path / "a.old.txt", tmp_path / "b.new.txt"
    for path in (old, new):
        path.write_text("x")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    assert libretranslate.forget_old(tmp_path, libretranslate.KEEP_FILES_SECONDS) == 1
    assert not old.exists() and new.exists()


def test_a_translated_file_past_its_time_is_not_downloaded(tmp_path):
    """Before, a translated file stayed downloadable until the next /translate_file swept
    the folder: on a server that took no more files, its link worked for ever, not the 30
    minutes the docs say."""
    import os
    import time

    api = libretranslate.LibreTranslateApi(None, None, [], None, tmp_path, 1 << 20)
    old, new = tmp_path / "1.old.txt", tmp_path / "2.new.txt"
    for path in (old, new):
        path.write_text("x")
    late = time.time() - libretranslate.KEEP_FILES_SECONDS - 60
    os.utime(old, (late, late))

    def download(name: str):
        scope = {"type": "http", "method": "GET", "path": f"/download_file/{name}"}
        return asyncio.run(api.download_file(Request(scope | {"path_params": {"name": name}})))

    assert download(new.name).status_code == 200
    gone = download(old.name)
    assert gone.status_code == 400 and gone.body == b'{"error":"Invalid filename"}'
    assert not old.exists() and new.exists()
