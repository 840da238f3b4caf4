"""The HTTP/JSON API of a live server (service.front.http): the contract's JSON form equal to
gRPC's answers, its errors, streams, uploads, health and document; LibreTranslate's API as
its own client (libretranslatepy from PyPI) and raw requests call it; tokens as api keys."""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from xml.etree import ElementTree

import httpx
import pytest
from google.protobuf import json_format
from helpers import CHAPTER, ROOT, epub
from libretranslatepy import LibreTranslateAPI

from service.wire.v1 import caption_pb2, caption_pb2_grpc, translation_pb2

SENTENCES = ["Hola, ¿cómo estás?", "El perro come pan.", "Buenos días."]
TOKEN = "http-test-token-0123456789"
CAPTION_ONLY = "http-caption-token-0123456789"
IMAGE = ROOT / "examples" / "scene.png"
NODE_CLIENT = ROOT / "tests" / "server" / "node"  # LibreTranslate's npm client, as published


@pytest.fixture(scope="module")
def http_server(start_server):
    return start_server("--workers", "1", "--http-listen", "127.0.0.1:0")


@pytest.fixture(scope="module")
def web(http_server):
    with httpx.Client(base_url=http_server.http_url, timeout=60) as session:
        yield session


def events(text: str) -> list[tuple[str, dict]]:
    """(event, data) of a server-sent event stream."""
    found = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        found.append((lines.get("event", "message"), json.loads(lines["data"])))
    return found


def test_translate_is_grpcs_answer_as_json(http_server, web):
    request = translation_pb2.TranslateRequest(texts=SENTENCES)
    request.options.beam_size = 4
    expected = json_format.MessageToDict(http_server.stub.Translate(request))
    answer = web.post("/v1/translate", json={"texts": SENTENCES, "options": {"beamSize": 4}})
    assert answer.status_code == 200
    assert answer.json() == expected
    assert answer.json()["translations"][0]["hypotheses"][0]["text"] == "Hello, how are you?"
    # protobuf's field names are accepted as well as the JSON mapping's
    snake = web.post("/v1/translate", json={"texts": SENTENCES, "options": {"beam_size": 4}})
    assert snake.json() == expected


def test_errors_name_the_field_with_the_grpc_status_as_http(web):
    empty = web.post("/v1/translate", json={"texts": ["Hola", " "]})
    assert empty.status_code == 400
    assert empty.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert empty.json()["error"]["message"].startswith("texts[1]")
    unknown = web.post("/v1/translate", json={"textz": ["Hola"]})
    assert unknown.status_code == 400 and "textz" in unknown.json()["error"]["message"]
    model = web.post("/v1/translate", json={"texts": ["Hola"], "model": "nobody"})
    assert model.status_code == 404 and model.json()["error"]["status"] == "NOT_FOUND"
    options = web.post("/v1/translate", json={"texts": ["Hola"], "options": {"beamSize": 0}})
    assert options.status_code == 400 and "beam_size" in options.json()["error"]["message"]
    timeout = web.post(
        "/v1/translate", json={"texts": ["Hola"]}, headers={"x-request-timeout": "x"}
    )
    assert timeout.status_code == 400 and "x-request-timeout" in timeout.json()["error"]["message"]
    not_json = web.post("/v1/score", content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 400


def test_a_passed_deadline_is_504_and_other_calls_go_on(web):
    slow = {"texts": [" ".join(SENTENCES * 20)], "options": {"beamSize": 8}}
    with ThreadPoolExecutor(2) as pool:
        late = pool.submit(
            web.post, "/v1/translate", json=slow, headers={"x-request-timeout": "0.05"}
        )
        fine = pool.submit(web.post, "/v1/translate", json={"texts": SENTENCES[:1]})
        assert late.result().status_code == 504
        assert late.result().json()["error"]["status"] == "DEADLINE_EXCEEDED"
        assert fine.result().status_code == 200


def test_a_stream_is_partials_then_the_result(web):
    text = "Hola amigo. El perro come pan. Buenos días."
    answer = web.post("/v1/translate:stream", json={"text": text})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    found = events(answer.text)
    assert [kind for kind, _ in found] == ["message"] * len(found)
    assert all("partial" in data for _, data in found[:-1]) and len(found) >= 2
    result = found[-1][1]["result"]
    whole = web.post("/v1/translate", json={"texts": [text]}).json()
    assert result["translations"] == whole["translations"]
    refused = web.post("/v1/translate:stream", json={"text": ""})
    assert refused.status_code == 400 and refused.json()["error"]["message"].startswith("text:")


def test_caption_as_base64_json_and_as_an_upload(http_server, web):
    image = IMAGE.read_bytes()
    stub = caption_pb2_grpc.CaptionServiceStub(http_server.channel)
    expected = json_format.MessageToDict(
        stub.Caption(caption_pb2.CaptionRequest(images=[image], return_attention=True))
    )
    import base64

    body = {"images": [base64.b64encode(image).decode()], "returnAttention": True}
    as_json = web.post("/v1/caption", json=body)
    assert as_json.status_code == 200 and as_json.json() == expected
    assert as_json.json()["captions"][0]["hypotheses"][0]["attention"]
    upload = web.post(
        "/v1/caption",
        files=[("images", ("scene.png", image, "image/png"))],
        data={"returnAttention": "true"},
    )
    assert upload.status_code == 200 and upload.json() == expected
    broken = web.post("/v1/caption", files=[("images", ("x.png", b"not an image", "image/png"))])
    assert broken.status_code == 400 and "images[0]" in broken.json()["error"]["message"]


def test_score_health_models_and_the_document(web):
    score = web.post("/v1/score", json={"pairs": [{"source": "Hola", "target": "Hello"}]})
    assert score.status_code == 200 and score.json()["scores"][0]["logProb"] < 0
    assert web.get("/v1/health").json() == {"status": "SERVING"}
    models = {m["name"]: m for m in web.get("/v1/models").json()["models"]}
    assert models["translator"]["languages"] == {"source": ["es"], "target": ["en"]}
    assert models["captioner"]["service"] == "attnserve.v1.CaptionService"
    document = web.get("/openapi.json").json()
    for path in ("/v1/translate", "/v1/translate:stream", "/v1/score", "/v1/caption", "/translate"):
        assert path in document["paths"], path
    schema = document["components"]["schemas"]["attnserve.v1.TranslateRequest"]
    assert schema["properties"]["texts"] == {"type": "array", "items": {"type": "string"}}
    assert web.get("/docs", follow_redirects=True).status_code == 200


def test_http_calls_are_counted_under_their_own_method_label(http_server, web):
    calls = "attnserve_request_duration_seconds_count"
    before = http_server.value(calls, method="http/Score", code="OK")
    web.post("/v1/score", json={"pairs": [{"source": "Hola", "target": "Hello"}]})
    after = http_server.value(calls, method="http/Score", code="OK")
    assert after == before + 1
    # the wait for a batch place too: not under the gRPC method's label
    waits, queued = "attnserve_queue_wait_seconds_count", "attnserve_requests_queued"
    before = {m: http_server.value(waits, method=m) for m in ("http/Translate", "Translate")}
    assert web.post("/v1/translate", json={"texts": ["Una espera contada."]}).status_code == 200
    after = {m: http_server.value(waits, method=m) for m in ("http/Translate", "Translate")}
    assert after["http/Translate"] == before["http/Translate"] + 1
    assert after["Translate"] == before["Translate"]
    assert http_server.value(queued, method="http/Translate") == 0


def test_libretranslate_clients_own_calls(http_server):
    client = LibreTranslateAPI(http_server.http_url + "/")
    assert client.translate("Buenos días.", "es", "en") == "Good morning."
    assert client.detect("¿Dónde está la estación de tren?")[0]["language"] == "es"
    assert client.languages() == [
        {"code": "en", "name": "English", "targets": []},
        {"code": "es", "name": "Spanish", "targets": ["en"]},
    ]


def npm_translate(url: str, **options) -> str:
    """libretranslate's `translate` (npm) run in Node.js; its result as JSON text."""
    node = shutil.which("node")
    assert node, "node is installed by ./dev.sh"
    assert (NODE_CLIENT / "node_modules").is_dir(), "npm ci --prefix tests/server/node (./dev.sh)"
    script = (
        "require('libretranslate').translate(JSON.parse(process.argv[1]))"
        ".then(t => console.log(JSON.stringify(t)), e => { console.error(e); process.exit(1); })"
    )
    argument = json.dumps({"apiurl": url, **options})
    done = subprocess.run(
        [node, "-e", script, argument], cwd=NODE_CLIENT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_libretranslates_npm_client_unchanged(http_server):
    url = http_server.http_url
    assert npm_translate(url, query="Buenos días.", source="es", target="en") == "Good morning."
    assert npm_translate(url, query="El perro come pan.", target="en") == "The dog eats bread."
    html = npm_translate(
        url, query="<p>El perro <b>come</b>.</p>", source="es", target="en", format="html"
    )
    assert html.startswith("<p>") and "<b>" in html


def test_libretranslate_json_lists_auto_html_alternatives_and_errors(web):
    listed = web.post("/translate", json={"q": SENTENCES, "source": "auto", "target": "en"})
    assert listed.status_code == 200
    body = listed.json()
    assert len(body["translatedText"]) == 3 and body["translatedText"][0] == "Hello, how are you?"
    assert [d["language"] for d in body["detectedLanguage"]] == ["es"] * 3
    html = web.post(
        "/translate",
        json={
            "q": "<p>El perro <b>come</b> pan.</p>",
            "source": "es",
            "target": "en",
            "format": "html",
        },
    )
    assert (
        html.json()["translatedText"].startswith("<p>") and "<b>" in html.json()["translatedText"]
    )
    more = web.post(
        "/translate",
        data={"q": "Buenos días.", "source": "es", "target": "en", "alternatives": "2"},
    )
    assert (
        len(more.json()["alternatives"]) <= 2 and more.json()["translatedText"] == "Good morning."
    )
    for body, message in (
        ({"source": "es", "target": "en"}, "Invalid request: missing q parameter"),
        ({"q": "Hola", "target": "en"}, "Invalid request: missing source parameter"),
        ({"q": "Hola", "source": "es", "target": "fr"}, "fr is not supported"),
        ({"q": "Hola", "source": "de", "target": "en"}, "de is not supported"),
        ({"q": "Hola", "source": "fr", "target": "en"}, "fr is not supported"),
        (
            {"q": "Hola", "source": "es", "target": "en", "format": "pdf"},
            "pdf format is not supported",
        ),
    ):
        answer = web.post("/translate", json=body)
        assert answer.status_code == 400 and answer.json() == {"error": message}, body


def test_libretranslate_codes_blank_texts_and_a_text_already_in_the_target(web):
    """Codes in any case; a text with nothing to translate, or in the target language, comes
    back as it is, the others of its batch translated."""
    upper = web.post("/translate", json={"q": "Buenos días.", "source": "ES", "target": "EN"})
    assert upper.status_code == 200 and upper.json() == {"translatedText": "Good morning."}
    mixed = web.post(
        "/translate", json={"q": ["Buenos días.", " ", "🙂 !"], "source": "es", "target": "en"}
    )
    assert mixed.json() == {"translatedText": ["Good morning.", " ", "🙂 !"]}
    english = "Where is the train station?"
    detected = web.post("/detect", json={"q": english})
    assert detected.json()[0]["language"] == "en"  # among every language served
    auto = web.post("/translate", json={"q": english, "source": "auto", "target": "en"})
    assert auto.json()["translatedText"] == english
    assert auto.json()["detectedLanguage"]["language"] == "en"
    same = web.post("/translate", json={"q": "Hola.", "source": "en", "target": "en"})
    assert same.json() == {"translatedText": "Hola."}
    nothing = web.post("/translate", json={"q": "🙂", "source": "auto", "target": "en"})
    assert nothing.json()["detectedLanguage"]["confidence"] == 0.0
    # more alternatives than a beam searches: as many as it finds
    many = web.post(
        "/translate",
        content=json.dumps(
            {"q": "Buenos días.", "source": "es", "target": "en", "alternatives": 40}
        ),
        headers={"content-type": "application/vnd.api+json"},
    )
    assert many.status_code == 200 and 0 < len(many.json()["alternatives"]) <= 15
    for alternatives in ("1e400", "-1e400", "x"):  # JSON's 1e400 reads as infinity
        odd = web.post(
            "/translate",
            content='{"q": "Hola.", "source": "es", "target": "en", "alternatives": %s}'
            % (alternatives if alternatives != "x" else '"x"'),
            headers={"content-type": "application/json"},
        )
        assert odd.status_code == 400, (alternatives, odd.text)
        assert odd.json() == {"error": "Invalid request: alternatives parameter is not a number"}
    # markup with no text between its tags comes back as it is, over both APIs
    for path, body, read in (
        ("/translate", {"q": "<p>&nbsp;</p>", "source": "es", "target": "en", "format": "html"},
         lambda b: b["translatedText"]),
        ("/v1/translate", {"texts": ["<br>"], "textFormat": "TEXT_FORMAT_HTML"},
         lambda b: b["translations"][0]["hypotheses"][0]["text"]),
    ):  # fmt: skip
        answer = web.post(path, json=body)
        assert answer.status_code == 200, answer.text
        assert read(answer.json()) == (body.get("q") or body["texts"][0])


def test_browsers_may_call_from_any_origin_and_the_rest_of_libretranslate(web):
    origin = {"origin": "https://example.org"}
    preflight = web.options(
        "/translate",
        headers={
            **origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type,authorization",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert web.get("/languages", headers=origin).headers["access-control-allow-origin"] == "*"
    suggest = web.post("/suggest", data={"q": "Hola", "s": "Hello", "source": "es", "target": "en"})
    assert suggest.status_code == 403
    assert suggest.json() == {"error": "Suggestions are disabled on this server."}
    assert web.get("/spec").json() == web.get("/openapi.json").json()


# an EPUB 2 book's table of contents: one entry
CONTENTS = (
    '<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1"><navMap>'
    '<navPoint id="p1" playOrder="1"><navLabel><text>Buenos días.</text></navLabel>'
    '<content src="text/cap%C3%ADtulo.xhtml"/></navPoint></navMap></ncx>'
)


def test_libretranslate_files_round_trip(web):
    sent = web.post(
        "/translate_file",
        data={"source": "es", "target": "en"},
        files={
            "file": ("carta.txt", "Buenos días.\n\nEl perro come pan.\n".encode(), "text/plain")
        },
    )
    assert sent.status_code == 200
    url = sent.json()["translatedFileUrl"]
    assert url.startswith(str(web.base_url)) and url.endswith(".carta.txt")
    got = web.get(url)
    assert got.status_code == 200 and "carta.txt" in got.headers["content-disposition"]
    assert got.text.startswith("Good morning.\n\n")
    assert web.get("/download_file/nothing.txt").status_code == 400
    refused = web.post(
        "/translate_file",
        data={"source": "es", "target": "en"},
        files={"file": ("a.rtf", b"{\\rtf1 Hola}", "application/rtf")},
    )
    assert refused.json() == {"error": "Invalid request: file format not supported"}
    settings = web.get("/frontend/settings").json()
    assert settings["supportedFilesFormat"] == [
        *(".txt", ".html", ".htm", ".srt", ".epub", ".docx", ".pptx", ".odt", ".odp", ".pdf")
    ]
    subtitles = "1\n00:00:01,000 --> 00:00:02,000\nBuenos\ndías.\n"
    sent = web.post(
        "/translate_file",
        data={"source": "es", "target": "en"},
        files={"file": ("film.srt", subtitles.encode(), "application/x-subrip")},
    )
    got = web.get(sent.json()["translatedFileUrl"]).text
    assert got == "1\n00:00:01,000 --> 00:00:02,000\nGood\nmorning.\n"  # one sentence, 2 lines
    spanish = CHAPTER.replace("<html ", '<html lang="es" ')
    book = web.post(
        "/translate_file",
        data={"source": "es", "target": "en"},
        files={"file": ("libro.epub", epub(spanish, CONTENTS, "es"), "application/epub+zip")},
    )
    archive = zipfile.ZipFile(io.BytesIO(web.get(book.json()["translatedFileUrl"]).content))
    chapter = archive.read("OEBPS/text/capítulo.xhtml").decode()
    ElementTree.fromstring(chapter.encode())  # still XML, its tags as they were
    assert "<b>" in chapter and "perro" not in chapter and "dog" in chapter
    assert '<html lang="en" ' in chapter  # the language it is now written in
    assert archive.infolist()[0].filename == "mimetype"
    contents = archive.read("OEBPS/toc.ncx").decode()
    assert "Buenos días" not in contents and "Good morning" in contents
    assert "<dc:language>en</dc:language>" in archive.read("OEBPS/content.opf").decode()


def test_a_docx_comes_back_translated_with_its_bold_word_bold(web):
    import docx

    document = docx.Document()
    paragraph = document.add_paragraph("El perro ")
    paragraph.add_run("come").bold = True
    paragraph.add_run(" pan. La contraseña es incorrecta.")
    document.add_table(rows=1, cols=1).cell(0, 0).text = "Buenos días."
    sent = io.BytesIO()
    document.save(sent)
    answer = web.post(
        "/translate_file",
        data={"source": "es", "target": "en"},
        files={"file": ("carta.docx", sent.getvalue())},
    )
    assert answer.status_code == 200, answer.text
    back = docx.Document(io.BytesIO(web.get(answer.json()["translatedFileUrl"]).content))
    expected = web.post("/v1/translate", json={"texts": [paragraph.text]}).json()
    translated = back.paragraphs[0]
    assert translated.text == expected["translations"][0]["hypotheses"][0]["text"]
    assert [r.text for r in translated.runs if r.bold] == [" eats"]
    assert back.tables[0].cell(0, 0).text == "Good morning."
    broken = web.post(
        "/translate_file",
        data={"source": "es", "target": "en"},
        files={"file": ("x.docx", b"not a document")},
    )
    assert broken.status_code == 400 and broken.json()["error"].startswith(
        "Invalid request: x.docx"
    )
    assert web.get("/health").json() == {"status": "ok"}


def test_tokens_are_bearer_headers_and_libretranslate_keys(start_server):
    secured = start_server(
        "--workers", "1", "--http-listen", "127.0.0.1:0",
        "--auth-tokens", f"{TOKEN};{CAPTION_ONLY} caption",
    )  # fmt: skip
    with httpx.Client(base_url=secured.http_url, timeout=60) as web:
        body = {"texts": ["Hola"]}
        assert web.post("/v1/translate", json=body).status_code == 401
        wrong = web.post(
            "/v1/translate", json=body, headers={"authorization": f"Bearer {CAPTION_ONLY}"}
        )
        assert wrong.status_code == 403 and wrong.json()["error"]["status"] == "PERMISSION_DENIED"
        right = web.post("/v1/translate", json=body, headers={"authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200
        assert web.get("/v1/health").status_code == 200  # probes need no token
        keyless = web.post("/translate", json={"q": "Hola", "source": "es", "target": "en"})
        assert keyless.status_code == 400 and "API key" in keyless.json()["error"]
        bad = web.post(
            "/translate", json={"q": "Hola", "source": "es", "target": "en", "api_key": "x" * 20}
        )
        assert bad.status_code == 403 and bad.json() == {"error": "Invalid API key"}
        assert web.get("/frontend/settings").json()["keyRequired"] is True
    client = LibreTranslateAPI(secured.http_url + "/", api_key=TOKEN)
    assert client.translate("Buenos días.", "es", "en") == "Good morning."
    # the npm client sends its key as apiKey
    keyed = npm_translate(
        secured.http_url, query="Buenos días.", source="es", target="en", apiKey=TOKEN
    )
    assert keyed == "Good morning."
    assert secured.value("attnserve_auth_refused_calls_total", code="UNAUTHENTICATED") >= 1


def test_a_drain_finishes_http_calls_in_flight_and_refuses_new_ones(start_server):
    server = start_server(
        "--workers", "1", "--drain-seconds", "150", "--http-listen", "127.0.0.1:0"
    )  # fmt: skip
    long = {"texts": [" ".join(SENTENCES * 12)] * 2, "options": {"beamSize": 8}}
    late = {"q": "Hola", "source": "es", "target": "en"}
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server.http_url, timeout=180) as web:
        running = pool.submit(httpx.post, server.http_url + "/v1/translate", json=long, timeout=180)
        server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") > 0, what="running")
        server.process.send_signal(signal.SIGTERM)
        server.wait_for(lambda: web.get("/v1/health").status_code == 503, what="drain")
        refused = web.post("/v1/translate", json={"texts": ["Hola."]})
        assert refused.status_code == 503 and "draining" in refused.json()["error"]["message"]
        assert web.post("/translate", json=late).status_code == 503
        assert web.get("/health").status_code == 503
        assert not running.done()
        finished = running.result(timeout=180)  # the call in flight finishes during the drain
    assert finished.status_code == 200 and len(finished.json()["translations"]) == 2
    assert server.process.wait(30) == 0
