"""The HTTP app's answers to what clients send wrong or odd, on the real Starlette app
(`build_app`) with a stand-in front and a translation servicer that upper-cases: no worker,
no model. Every refusal is JSON in its API's shape, and odd but valid input is served."""

from __future__ import annotations

import asyncio
import json
import re
import time
from types import SimpleNamespace
from urllib.parse import urljoin, urlsplit

import grpc
import httpx
import pytest
import yaml
from google.protobuf import json_format
from helpers import PROMETHEUS_DIR, PrefixProxy
from starlette.routing import Route
from starlette.testclient import TestClient

from service.front.config import ServerConfig
from service.front.http import app as http_app
from service.front.http.calls import URL_ENCODED
from service.front.metrics import Metrics
from service.front.security import parse_tokens
from service.front.servicer import Method, ModelServicer
from service.front.state import Front
from service.front.status import status_code
from service.front.translate import TranslationServicer
from service.runtime.errors import ResourceExhausted
from service.runtime.languages import Languages
from service.wire.v1 import decoding_pb2, translation_pb2

SERVICE = "attnserve.v1.TranslationService"
COUNTED = "attnserve_request_duration_seconds_count"


class UpperCase:
    """A servicer's `unary` as the HTTP side calls it: each text upper-cased, after `delay`."""

    service = SERVICE
    file = translation_pb2.DESCRIPTOR

    def __init__(self, delay: float):
        self.delay, self.requests, self.refusals = delay, [], []

    async def unary(self, method, request, context, label="", counted=True):
        self.requests.append(request)
        await asyncio.sleep(self.delay)
        hypotheses = [[decoding_pb2.Hypothesis(text=text.upper())] for text in request.texts]
        return translation_pb2.TranslateResponse(
            translations=[translation_pb2.Translation(hypotheses=h) for h in hypotheses]
        )

    def counted_at_edge(self, label, code, received, model=""):
        self.refusals.append((label, code.name))

    async def stream(self, method, request, context, label=""):
        """`request.text` upper-cased as a partial at once, then as the result after
        `delay`; `closed` is set when the stream is closed."""
        self.requests.append(request)
        self.closed = False
        try:
            partial = translation_pb2.PartialHypothesis(text=request.text.upper())
            yield translation_pb2.TranslateStreamResponse(partial=partial)
            await asyncio.sleep(self.delay)
            response = await self.unary(method, request, context, label)
            yield translation_pb2.TranslateStreamResponse(result=response)
        finally:
            self.closed = True


def served(
    tmp_path,
    delay: float = 0.0,
    max_body: int | None = None,
    monkeypatch=None,
    chars=100_000,
    tokens=(),
    refused=lambda code: None,
):
    """A test client of the app over a front serving versions 1 and 2 of `translator`
    (`tokens` on, its refusals told to `refused`)."""
    if max_body is not None:
        monkeypatch.setattr(http_app, "MAX_BODY", max_body)
    model = SimpleNamespace(kind="transformer", languages=Languages(("es",), ("en",)))
    front = SimpleNamespace(
        models={SERVICE: {"translator": {"1": model, "2": model}}},
        defaults={SERVICE: "translator"},
        config=SimpleNamespace(max_text_chars=chars),
        healthy=True,
        health=lambda service: True,
        services=[SERVICE],
    )
    servicer = UpperCase(delay)
    built = http_app.build_app(front, [servicer], list(tokens), refused, tmp_path / "files")
    return TestClient(built, raise_server_exceptions=False), servicer


def file_posted(web: TestClient, name: str, data: bytes, **given) -> httpx.Response:
    """LibreTranslate's /translate_file of `data` as a file `name`, Spanish to English."""
    return web.post(
        "/translate_file",
        files={"file": (name, data)},
        data={"source": "es", "target": "en"},
        **given,
    )


def test_detect_refuses_what_is_not_text(tmp_path):
    web, _ = served(tmp_path)
    for q in ([1, 2], {"a": 1}, ["Hola", None]):
        answer = web.post("/detect", json={"q": q})
        assert answer.status_code == 400, (q, answer.text)
        assert answer.json() == {
            "error": "Invalid request: q must be a string or a list of strings"
        }
    assert web.post("/detect", json={"q": ["Hola", "amigo"]}).status_code == 200


@pytest.mark.parametrize("name", ["carta #1.txt", "¿por qué?.txt", "100%.txt", "a" * 240 + ".txt"])
def test_a_translated_file_downloads_from_its_url_whatever_its_name(tmp_path, name):
    """A "#" or "?" in a file's name ended the link's path; a long name (legal on disk)
    failed once the uuid was put before it, after the whole file was translated."""
    web, _ = served(tmp_path)
    answer = file_posted(web, name, b"Hola amigo.")
    assert answer.status_code == 200, answer.text
    link = urlsplit(answer.json()["translatedFileUrl"])
    assert not link.query and not link.fragment
    download = web.get(link.path)
    assert download.status_code == 200 and download.content == b"HOLA AMIGO."
    assert len(link.path.rpartition("/")[2].encode()) <= 3 * 255


def test_one_deadline_bounds_every_batch_of_a_file(tmp_path):
    """X-Request-Timeout is the whole call's, not each 1,000 paragraphs' own: at 1 s a
    batch, a deadline of 1.5 s a batch would let all three through; the whole call's ends
    during the second (or the first, where reading the file took over half a second: the
    deadline counts from the call's start), and the third is never sent."""
    web, servicer = served(tmp_path, delay=1.0)
    text = "\n\n".join(f"Hola {i}." for i in range(2_500)).encode()  # 3 batches of calls
    answer = file_posted(web, "largo.txt", text, headers={"x-request-timeout": "1.5"})
    assert answer.status_code == 504
    assert 1 <= len(servicer.requests) <= 2


def test_a_document_paragraph_past_the_text_limit_is_sent_in_parts(tmp_path):
    """A .docx paragraph longer than the server's text limit was sent as one text, and the
    whole file refused for it; one sentence past the limit still is, naming its paragraph."""
    import io

    import docx

    web, servicer = served(tmp_path, chars=40)
    document = docx.Document()
    document.add_paragraph("El perro come pan. La casa es grande. El sol sale hoy.")
    document.add_paragraph("Adiós.")
    sent = io.BytesIO()
    document.save(sent)
    answer = file_posted(web, "carta.docx", sent.getvalue())
    assert answer.status_code == 200, answer.text
    texts = [text for request in servicer.requests for text in request.texts]
    assert texts == ["El perro come pan. La casa es grande. ", "El sol sale hoy.", "Adiós."]
    back = docx.Document(io.BytesIO(web.get(answer.json()["translatedFileUrl"]).content))
    assert [p.text for p in back.paragraphs] == [
        "EL PERRO COME PAN. LA CASA ES GRANDE. EL SOL SALE HOY.",
        "ADIÓS.",
    ]
    document.add_paragraph("Una frase muy larga que no termina nunca jamás.")
    sent = io.BytesIO()
    document.save(sent)
    refused = file_posted(web, "carta.docx", sent.getvalue())
    assert refused.status_code == 400
    assert refused.json()["error"] == (
        'Invalid request: carta.docx: paragraph 3 ("Una frase muy larga que no termina nunca...")'
        ": a sentence longer than 40 characters"
    )
    assert len(servicer.requests) == 1


def test_a_file_whose_translation_holds_control_characters_is_written(tmp_path):
    """A translation with a control character (the translator's byte pieces give them) made
    python-docx raise in the write step: a 500 in plain text, not the file."""
    import io

    import docx

    web, servicer = served(tmp_path)
    said = servicer.unary

    async def with_control_characters(method, request, context, *given):
        response = await said(method, request, context, *given)
        for translation in response.translations:
            translation.hypotheses[0].text = translation.hypotheses[0].text.replace(" ", " \x0b")
        return response

    servicer.unary = with_control_characters
    document = docx.Document()
    document.add_paragraph("El perro come pan.")
    sent = io.BytesIO()
    document.save(sent)
    answer = file_posted(web, "carta.docx", sent.getvalue())
    assert answer.status_code == 200, answer.text
    back = docx.Document(io.BytesIO(web.get(answer.json()["translatedFileUrl"]).content))
    assert [p.text for p in back.paragraphs] == ["EL PERRO COME PAN."]


def test_an_html_block_past_the_text_limit_is_sent_in_parts(tmp_path):
    """An HTML block longer than the server's text limit was sent as one text, and the whole
    file refused for it; one sentence past the limit still is, before any call."""
    web, servicer = served(tmp_path, chars=60)
    page = "<p>El perro <b>come pan. La casa</b> es grande. El sol sale hoy.</p><p>Adiós.</p>"
    answer = file_posted(web, "carta.html", page.encode())
    assert answer.status_code == 200, answer.text
    texts = [text for request in servicer.requests for text in request.texts]
    assert texts == [
        "<p>El perro <b>come pan. La casa</b> es grande. ",
        "El sol sale hoy.</p>",
        "<p>Adiós.</p>",
    ]
    assert web.get(answer.json()["translatedFileUrl"]).content == page.upper().encode()
    long = (
        "<p>Hola.</p><p>Una frase <i>muy larga</i> que no termina nunca jamás de los jamases.</p>"
    )
    refused = file_posted(web, "carta.html", long.encode())
    assert refused.status_code == 400
    assert refused.json()["error"] == (
        'Invalid request: carta.html: paragraph 2 ("Una frase muy larga que no termina nunca..."'
        "): a sentence longer than 60 characters"
    )
    assert len(servicer.requests) == 1


def test_a_pdf_comes_back_translated_and_an_encrypted_one_is_a_bad_request(tmp_path):
    """LibreTranslate's clients send PDFs to /translate_file (its settings list .pdf):
    refused as a format not supported, before."""
    import io

    from pdfminer.high_level import extract_text
    from reportlab.pdfgen import canvas

    def made(**given) -> bytes:
        out = io.BytesIO()
        page = canvas.Canvas(out, **given)
        page.drawString(72, 700, "Hola amigo.")
        page.save()
        return out.getvalue()

    web, servicer = served(tmp_path)
    listed = web.get("/frontend/settings").json()["supportedFilesFormat"]
    (accepted,) = re.findall(r'id="document" type="file" accept="([^"]+)"', web.get("/").text)
    assert ".pdf" in listed and sorted(accepted.split(",")) == sorted(listed)  # the page's too
    answer = file_posted(web, "carta.pdf", made())
    assert answer.status_code == 200, answer.text
    assert [list(request.texts) for request in servicer.requests] == [["Hola amigo."]]
    back = web.get(answer.json()["translatedFileUrl"]).content
    assert extract_text(io.BytesIO(back)).split() == ["HOLA", "AMIGO."]
    refused = file_posted(web, "secreto.pdf", made(encrypt="clave"))
    assert refused.status_code == 400
    assert refused.json()["error"].startswith(
        "Invalid request: secreto.pdf: .pdf: encrypted (protected by a password)"
    )
    assert len(servicer.requests) == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/translate", b'{"q": "Hola", "source": "es", "target": "en"'),
        ("/v1/translate", b'{"texts": ["Hola."]'),
    ],
)
def test_a_body_past_the_bound_is_413_on_both_apis(tmp_path, monkeypatch, path, body):
    """Too large is no overload: 429 would have retrying clients send the body again."""
    web, servicer = served(tmp_path, max_body=1_000, monkeypatch=monkeypatch)
    big = body + b" " * 2_000 + b"}"
    for chunked in (False, True):
        content = iter([big]) if chunked else big  # a generator: no Content-Length said
        answer = web.post(path, content=content, headers={"content-type": "application/json"})
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        if path == "/translate":  # LibreTranslate's shape
            assert error == "Request too large: at most 1000 bytes"
        else:
            assert (error["code"], error["status"]) == (413, "INVALID_ARGUMENT")
            assert "1000" in error["message"]  # the bound named
    assert servicer.requests == []


def ratio_leaves_out() -> re.Pattern:
    """The status codes the error ratio's rule (deploy/prometheus/rules.yml) leaves out."""
    rules = yaml.safe_load((PROMETHEUS_DIR / "rules.yml").read_text())
    (expr,) = [
        rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("record") == "attnserve:request_errors:ratio_rate5m"
    ]
    return re.compile(re.search(r'code!~"([^"]*)"', expr).group(1))


def test_a_body_too_large_is_left_out_of_the_error_ratio_and_an_overload_is_not(
    tmp_path, monkeypatch
):
    """A body past the bound was counted RESOURCE_EXHAUSTED, the code of the server's own
    overload (a full queue), so the error ratio's alert took a client's mistake for the
    server's: it is the caller's INVALID_ARGUMENT now, which the ratio leaves out."""
    web, servicer = served(tmp_path, max_body=1_000, monkeypatch=monkeypatch)
    for path, body in (("/v1/translate", b'{"texts": ["Hola."]'), ("/translate", b'{"q": "Hola"')):
        big = body + b" " * 2_000 + b"}"
        answer = web.post(path, content=big, headers={"content-type": "application/json"})
        assert answer.status_code == 413, answer.text
    labels = [label for label, _ in servicer.refusals]
    assert labels == ["http/Translate", "http/libretranslate/translate"]
    left_out = ratio_leaves_out()
    assert [left_out.fullmatch(code) is not None for _, code in servicer.refusals] == [True, True]
    overload = status_code(ResourceExhausted("max_queued_requests")).name
    assert left_out.fullmatch(overload) is None


def test_starlettes_own_refusals_are_json_in_each_api_s_shape(tmp_path):
    web, _ = served(tmp_path)
    for answer, status, code in (
        (web.post("/v1/nope", json={}), 404, "NOT_FOUND"),
        (web.get("/v1/translate"), 405, "UNIMPLEMENTED"),
        (
            web.post(
                "/v1/translate",
                content=b"--x\r\nbroken",
                headers={"content-type": "multipart/form-data"},  # no boundary
            ),
            400,
            "INVALID_ARGUMENT",
        ),
    ):
        assert answer.status_code == status, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["status"]) == (status, code) and error["message"]
    many = "&".join(f"f{i}=1" for i in range(1_100))  # past Starlette's 1,000 fields
    for path in ("/translate", "/v1/translate"):
        answer = web.post(
            path, content=many, headers={"content-type": "application/x-www-form-urlencoded"}
        )
        assert answer.status_code == 400 and "error" in answer.json(), answer.text


def test_a_form_s_text_may_start_with_a_bracket(tmp_path):
    """A repeated field's form value that is a JSON list is the list; any other text is a
    text, "[Nota] ..." too."""
    web, servicer = served(tmp_path)
    answer = web.post("/v1/translate", data={"texts": "[Nota] El perro come pan."})
    assert answer.status_code == 200, answer.text
    assert list(servicer.requests[-1].texts) == ["[Nota] El perro come pan."]
    listed = web.post("/v1/translate", data={"texts": '["Uno.", "Dos."]'})
    assert listed.status_code == 200 and list(servicer.requests[-1].texts) == ["Uno.", "Dos."]


def test_the_default_version_is_the_one_a_call_naming_none_gets(tmp_path):
    web, _ = served(tmp_path)
    models = web.get("/v1/models").json()["models"]
    assert [(m["version"], m["default"]) for m in models] == [("1", False), ("2", True)]


def test_a_body_sent_in_chunks_is_bounded_as_it_comes(tmp_path, monkeypatch):
    """A body of no length said (chunked) was read whole, a form's file part too, and only
    then measured: it is counted as it comes, and refused past the bound."""
    web, servicer = served(tmp_path, max_body=1_000, monkeypatch=monkeypatch)
    boundary = "b0undary"
    part = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        + b"Hola. " * 1_000
        + f"\r\n--{boundary}--\r\n".encode()
    )
    headers = {"content-type": f"multipart/form-data; boundary={boundary}"}

    def chunks():
        for start in range(0, len(part), 500):
            yield part[start : start + 500]

    answer = web.post("/v1/translate", content=chunks(), headers=headers)
    assert answer.status_code == 413 and answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    answer = web.post("/translate_file", content=chunks(), headers=headers)
    assert answer.status_code == 413 and "too large" in answer.json()["error"]
    assert servicer.requests == []


def test_auto_translates_a_text_too_short_to_tell_from_the_target(tmp_path):
    """ "Hola" is as much English as Spanish to the identifier: a tie with the target goes
    to the other language, and the text is translated, not sent back as it is."""
    web, servicer = served(tmp_path)
    answer = web.post("/translate", json={"q": "Hola", "source": "auto", "target": "en"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["translatedText"] == "HOLA" and servicer.requests
    assert answer.json()["detectedLanguage"]["language"] == "es"


@pytest.mark.parametrize("path", ["/v1/translate", "/translate"])
def test_a_url_encoded_form_reads_its_text_in_its_charset(tmp_path, path):
    """`curl -d 'q=año'` sends the form's UTF-8 unescaped: it was read as Latin-1 ("aÃ±o")
    and translated as that; an escaped form, and one naming its charset, read the same."""
    web, servicer = served(tmp_path)
    field = "texts" if path.startswith("/v1/") else "q"
    rest = "" if path.startswith("/v1/") else "&source=es&target=en"
    form = "application/x-www-form-urlencoded"
    for body, content_type in (
        (f"{field}=año+y+niño{rest}".encode(), form),
        (f"{field}=a%C3%B1o+y+ni%C3%B1o{rest}".encode(), form),
        (f"{field}=año y niño{rest}".encode("latin-1"), f"{form}; charset=ISO-8859-1"),
        (f"{field}=a%F1o+y+ni%F1o{rest}".encode(), f"{form}; charset=latin-1"),
    ):
        answer = web.post(path, content=body, headers={"content-type": content_type})
        assert answer.status_code == 200, (body, answer.text)
        assert list(servicer.requests[-1].texts) == ["año y niño"], (body, content_type)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/translate", {"texts": ["Hola."]}),
        ("/translate", {"q": "Hola.", "source": "es", "target": "en"}),
    ],
)
def test_a_client_gone_mid_call_cancels_it_and_raises_nothing(tmp_path, path, body):
    """The call of a client that disconnects is cancelled; its CancelledError went out of
    the app, and uvicorn logged it as an error with its traceback."""
    web, servicer = served(tmp_path, delay=30.0)
    messages = [
        {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False},
        {"type": "http.disconnect"},
    ]

    async def receive():
        await asyncio.sleep(0.05)
        return messages.pop(0)

    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(web.app(scope, receive, send), 5))
    assert time.monotonic() - started < 5 and len(servicer.requests) == 1


def test_libretranslate_s_calls_that_read_a_deadline_list_its_header(tmp_path):
    """/translate and /translate_file read X-Request-Timeout as /v1 does; the document
    listed it for /v1 alone."""
    web, _ = served(tmp_path)
    paths = web.get("/spec").json()["paths"]
    for path in ("/translate", "/translate_file"):
        (parameter,) = paths[path]["post"]["parameters"]
        assert (parameter["name"].lower(), parameter["in"]) == ("x-request-timeout", "header")
        assert parameter["schema"] == {"type": "number", "exclusiveMinimum": 0}
    assert "parameters" not in paths["/detect"]["post"]
    body = {"q": "Hola.", "source": "es", "target": "en"}
    refused = web.post("/translate", json=body, headers={"X-Request-Timeout": "0"})
    assert refused.status_code == 400 and "a number of seconds above 0" in refused.json()["error"]
    assert web.post("/translate", json=body, headers={"X-Request-Timeout": "30"}).status_code == 200


def test_the_document_names_every_route_and_libretranslate_s_fields(tmp_path):
    """/spec, where LibreTranslate's clients find its API, listed no field of any of its
    calls (the docs page sent them empty) and left out /suggest and /download_file."""
    web, _ = served(tmp_path)
    document = web.get("/spec").json()
    paths = document["paths"]
    meta = {"/openapi.json", "/spec", "/docs", "/"}
    for route in web.app.routes:
        if isinstance(route, Route) and route.path not in meta:
            assert route.path in paths, route.path
            assert set(paths[route.path]) == {m.lower() for m in route.methods} - {"head"}
    for path, fields in (
        ("/translate", {"q", "source", "target", "format", "alternatives", "api_key"}),
        ("/detect", {"q", "api_key"}),
        ("/translate_file", {"file", "source", "target", "api_key"}),
    ):
        for media in paths[path]["post"]["requestBody"]["content"].values():
            schema = media["schema"]
            if "$ref" in schema:
                schema = document["components"]["schemas"][schema["$ref"].rpartition("/")[2]]
            assert set(schema["properties"]) == fields, path
    example = paths["/translate"]["post"]["requestBody"]["content"]["application/json"]
    answer = web.post("/translate", json=example["example"])
    assert answer.status_code == 200, answer.text
    examples = {  # the /docs page sends these as they are
        path: paths[path]["post"]["requestBody"]["content"]["application/json"]["example"]
        for path in ("/v1/translate", "/v1/translate:stream", "/v1/score")
    }
    assert web.post("/v1/translate", json=examples["/v1/translate"]).status_code == 200
    score = json_format.ParseDict(examples["/v1/score"], translation_pb2.ScoreRequest())
    assert [(p.source, p.target) for p in score.pairs] == [("Hola.", "Hello.")]
    assert json_format.ParseDict(
        examples["/v1/translate:stream"], translation_pb2.TranslateStreamRequest()
    ).text
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(document)


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_json_body_may_start_with_a_byte_order_mark(tmp_path, content_type):
    """A UTF-8 byte order mark (Windows' editors and PowerShell write one) was refused by
    /v1 as "Unexpected UTF-8 BOM", though LibreTranslate's calls took the same body."""
    web, servicer = served(tmp_path)
    for path, body in (
        ("/v1/translate", {"texts": ["año"]}),
        ("/translate", {"q": "año", "source": "es", "target": "en"}),
    ):
        content = b"\xef\xbb\xbf" + json.dumps(body, ensure_ascii=False).encode()
        answer = web.post(path, content=content, headers={"content-type": content_type})
        if path == "/translate" and content_type != "application/json":
            continue  # LibreTranslate reads such a body as a form, as Flask does
        assert answer.status_code == 200, (path, answer.text)
        assert list(servicer.requests[-1].texts) == ["año"]


def test_a_stream_past_its_deadline_ends_with_an_error_event(tmp_path):
    """The deadline bounded a stream only until its first message: after it, a stream
    went on as long as its decode took, whatever X-Request-Timeout said."""
    web, servicer = served(tmp_path, delay=5.0)
    started = time.monotonic()
    answer = web.post(
        "/v1/translate:stream",
        json={"text": "Hola."},
        headers={"x-request-timeout": "0.5"},
    )
    assert time.monotonic() - started < 2.5 and servicer.closed
    assert answer.status_code == 200, answer.text
    partial, error = answer.text.strip().split("\n\n")
    assert partial == 'data: {"partial": {"text": "HOLA."}}'
    assert error.startswith("event: error\ndata: ")
    assert json.loads(error.partition("data: ")[2])["error"]["status"] == "DEADLINE_EXCEEDED"


@pytest.mark.parametrize(
    "path, body",
    [
        ("/translate", '{"q": "Hola \\ud800 amigo", "source": "es", "target": "en"}'),
        ("/translate", '{"q": ["Hola", "\\udfff"], "source": "es", "target": "en"}'),
        ("/translate", '{"q": "Hola", "source": "\\ud800", "target": "en"}'),
        ("/translate", '{"q": "Hola", "source": "es", "target": "en", "format": "\\ud800"}'),
        ("/detect", '{"q": "\\ud800"}'),
    ],
)
def test_a_lone_surrogate_in_libretranslate_json_is_a_bad_request(tmp_path, path, body):
    """JSON's "\\ud800" escape reads as a string UTF-8 cannot encode: the message, or the
    answer that echoed it, failed to encode with a 500 in plain text and a traceback."""
    web, servicer = served(tmp_path)
    answer = web.post(path, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"error": "Invalid request: an unpaired surrogate in the JSON body"}
    assert servicer.requests == []


def test_requests_refused_before_their_call_are_counted_as_calls(tmp_path, monkeypatch):
    """A body that did not parse, or was too large, was in no metric over HTTP, where a gRPC
    message that does not parse is counted INVALID_ARGUMENT: each is counted so now, under
    its route's method label and the default model; so is a language detection, which
    calls no model."""
    monkeypatch.setattr(http_app, "MAX_BODY", 1_000)
    model = SimpleNamespace(kind="transformer", languages=Languages(("es",), ("en",)))
    front = Front(ServerConfig(), {SERVICE: {"translator": {"1": model}}}, None, Metrics())
    front.serving = True
    servicer = TranslationServicer(front)
    built = http_app.build_app(front, [servicer], [], lambda code: None, tmp_path / "files")
    web = TestClient(built, raise_server_exceptions=False)
    json_type = {"content-type": "application/json"}
    big = b'{"texts": ["Hola."]' + b" " * 2_000 + b"}"
    for path, kwargs, status, code in (
        ("/v1/translate", {"json": {"nope": 1}}, 400, "INVALID_ARGUMENT"),
        ("/v1/translate", {"content": b"{", "headers": json_type}, 400, "INVALID_ARGUMENT"),
        ("/v1/translate", {"data": {"nope": "1"}}, 400, "INVALID_ARGUMENT"),
        (
            "/v1/translate",
            {"content": b"--x\r\nbroken", "headers": {"content-type": "multipart/form-data"}},
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "/v1/translate",
            {"json": {"texts": ["Hola."]}, "headers": {"x-request-timeout": "soon"}},
            400,
            "INVALID_ARGUMENT",
        ),
        ("/v1/translate", {"content": big, "headers": json_type}, 413, "INVALID_ARGUMENT"),
        ("/v1/translate:stream", {"json": {"texts": ["no"]}}, 400, "INVALID_ARGUMENT"),
        ("/translate", {"content": b"{", "headers": json_type}, 400, "INVALID_ARGUMENT"),
        ("/translate", {"json": {"q": "Hola", "source": "es"}}, 400, "INVALID_ARGUMENT"),
        ("/translate", {"content": big, "headers": json_type}, 413, "INVALID_ARGUMENT"),
        ("/translate_file", {"data": {"source": "es", "target": "en"}}, 400, "INVALID_ARGUMENT"),
        (
            "/translate_file",
            {"content": b"--x\r\nbroken", "headers": {"content-type": "multipart/form-data"}},
            400,
            "INVALID_ARGUMENT",
        ),
        ("/detect", {"json": {"text": "Hola"}}, 400, "INVALID_ARGUMENT"),
        ("/detect", {"json": {"q": "Hola amigo, ¿cómo estás?"}}, 200, "OK"),
    ):
        method = {
            "/v1/translate": "http/Translate",
            "/v1/translate:stream": "http/TranslateStream",
        }.get(path, "http/libretranslate" + path)
        labels = {"model": "translator", "method": method, "code": code}
        counted = "attnserve_request_duration_seconds_count"
        before = front.metrics.registry.get_sample_value(counted, labels) or 0
        answer = web.post(path, **kwargs)
        assert answer.status_code == status, (path, answer.text)
        after = front.metrics.registry.get_sample_value(counted, labels)
        assert after == before + 1, (path, kwargs, labels)


class Echo(ModelServicer):
    """TranslationService's `Translate` over the servicer's own accounting, each text
    upper-cased where a model would decode it: no worker, no model."""

    service = SERVICE
    file = translation_pb2.DESCRIPTOR

    def __init__(self, front):
        super().__init__(front)
        self.calls = 0
        self.methods = {"Translate": Method(prepare=self._prepare, respond=self._respond)}

    async def _prepare(self, model, request):
        self.calls += 1
        return SimpleNamespace(inputs=0, keys=None, texts=list(request.texts))

    def _respond(self, model, prepared, results):
        return translation_pb2.TranslateResponse(
            translations=[
                translation_pb2.Translation(hypotheses=[decoding_pb2.Hypothesis(text=t.upper())])
                for t in prepared.texts
            ]
        )


def test_a_libretranslate_request_is_counted_once_however_many_calls_it_makes(tmp_path):
    """A file of more than 1,000 paragraphs, sent to the model in several calls, was
    counted once per call (three requests for one, each with its own duration), and a text
    sent back as it is (its source is its target) was counted nowhere: each LibreTranslate
    request is now one sample of the request metrics."""
    model = SimpleNamespace(
        kind="transformer", languages=Languages(("es", "en"), ("en",)), worker_key="t/1@0"
    )
    pool = SimpleNamespace(check_admission=lambda rows=0: None)
    front = Front(ServerConfig(), {SERVICE: {"translator": {"1": model}}}, pool, Metrics())
    front.serving = True
    servicer = Echo(front)
    built = http_app.build_app(front, [servicer], [], lambda code: None, tmp_path / "files")
    web = TestClient(built, raise_server_exceptions=False)

    def counted(method: str) -> float:
        labels = {"model": "translator", "method": f"http/libretranslate/{method}", "code": "OK"}
        found = front.metrics.registry.get_sample_value(COUNTED, labels)
        return found or 0

    text = "\n\n".join(f"Hola {i}." for i in range(2_500)).encode()
    answer = file_posted(web, "largo.txt", text)
    assert answer.status_code == 200, answer.text
    assert servicer.calls == 3 and counted("translate_file") == 1
    same = web.post("/translate", json={"q": "Hello.", "source": "en", "target": "en"})
    assert same.json() == {"translatedText": "Hello."} and servicer.calls == 3
    assert counted("translate") == 1
    assert web.post("/translate", json={"q": "Hola.", "source": "es", "target": "en"}).json() == {
        "translatedText": "HOLA."
    }
    assert servicer.calls == 4 and counted("translate") == 2


def test_a_libretranslate_call_without_a_key_is_counted_as_a_refused_token(tmp_path):
    """With tokens on, a call with no key was refused (400, as LibreTranslate does) but
    counted nowhere, where a gRPC or /v1 call with no token is UNAUTHENTICATED."""
    tokens, refused = parse_tokens("a-token-of-sixteen-chars", "test"), []
    web, servicer = served(tmp_path, tokens=tokens, refused=refused.append)
    body = {"q": "Hola", "source": "es", "target": "en"}
    keyless = web.post("/translate", json=body)
    assert keyless.status_code == 400 and "API key" in keyless.json()["error"]
    unknown = web.post("/translate", json=body | {"api_key": "x" * 20})
    assert unknown.status_code == 403
    assert web.post("/v1/translate", json={"texts": ["Hola"]}).status_code == 401
    assert refused == [grpc.StatusCode.UNAUTHENTICATED] * 3
    assert servicer.requests == [] and servicer.refusals == []


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("/translate", {"json": {"q": "Hola", "target": "en"}}),
        ("/detect", {"json": {"text": "Hola"}}),
        ("/translate_file", {"files": {"file": ("a.exe", b"MZ")}, "data": {"target": "en"}}),
    ],
)
def test_a_libretranslate_call_is_refused_for_its_key_before_its_fields(tmp_path, path, sent):
    """With tokens on, a call without a known key whose fields were also wrong was told
    about its fields (400 "missing source"), as if it might be served once they were
    right; LibreTranslate's access check, as gRPC's interceptor, refuses the key first."""
    tokens, refused = parse_tokens("a-token-of-sixteen-chars", "test"), []
    web, servicer = served(tmp_path, tokens=tokens, refused=refused.append)
    keyless = web.post(path, **sent)
    assert keyless.status_code == 400, keyless.text
    assert keyless.json() == {"error": "Please contact the server operator to get an API key"}
    unknown = web.post(path, headers={"authorization": "Bearer " + "x" * 20}, **sent)
    assert unknown.status_code == 403 and unknown.json() == {"error": "Invalid API key"}
    assert refused == [grpc.StatusCode.UNAUTHENTICATED] * 2 and servicer.refusals == []
    known = web.post(path, headers={"authorization": "Bearer a-token-of-sixteen-chars"}, **sent)
    assert known.status_code == 400 and "API key" not in known.text


@pytest.mark.parametrize("path", ["/translate", "/translate_file", "/v1/translate"])
def test_a_call_without_a_key_is_refused_for_it_before_its_timeout_is_read(tmp_path, path):
    """With tokens on, a LibreTranslate call with no key and a bad X-Request-Timeout was
    told about its header and counted as a call refused INVALID_ARGUMENT, where /v1 (and
    gRPC's interceptor) refuses the token first and counts it as a refused token."""
    tokens, refused = parse_tokens("a-token-of-sixteen-chars", "test"), []
    web, servicer = served(tmp_path, tokens=tokens, refused=refused.append)
    sent = {
        "/translate": {"json": {"q": "Hola", "source": "es", "target": "en"}},
        "/translate_file": {
            "files": {"file": ("a.txt", b"Hola")},
            "data": {"source": "es", "target": "en"},
        },
        "/v1/translate": {"json": {"texts": ["Hola"]}},
    }[path]
    answer = web.post(path, headers={"x-request-timeout": "soon"}, **sent)
    assert answer.status_code in (400, 401) and "soon" not in answer.text, answer.text
    assert refused == [grpc.StatusCode.UNAUTHENTICATED] and servicer.refusals == []
    key = {"authorization": "Bearer a-token-of-sixteen-chars", "x-request-timeout": "soon"}
    told = web.post(path, headers=key, **sent)
    assert told.status_code == 400 and "soon" in told.text
    assert len(servicer.refusals) == 1 and servicer.requests == []


def test_the_models_are_listed_to_a_known_token_of_any_services(tmp_path):
    """/v1/models answered without a token where every other /v1 call asks for one; over
    gRPC what is served is listed by reflection, to a known token of any services. Health,
    and LibreTranslate's /languages (open in LibreTranslate too), need none."""
    tokens = parse_tokens("a-token-of-sixteen-chars;captions-only-token-0 caption", "test")
    refused = []
    web, _ = served(tmp_path, tokens=tokens, refused=refused.append)
    for presented in ({}, {"authorization": "Bearer a-wrong-token-0123456789"}):
        answer = web.get("/v1/models", headers=presented)
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["status"] == "UNAUTHENTICATED"
    for token in ("a-token-of-sixteen-chars", "captions-only-token-0"):
        answer = web.get("/v1/models", headers={"authorization": f"Bearer {token}"})
        assert answer.status_code == 200 and answer.json()["models"], token
    assert refused == [grpc.StatusCode.UNAUTHENTICATED] * 2
    for path in ("/v1/health", "/languages", "/health"):
        assert web.get(path).status_code == 200, path


def test_json_nested_past_the_recursion_limit_is_a_bad_request(tmp_path):
    """JSON nested deeper than Python's recursion limit raised RecursionError from
    json.loads: a 500 in plain text and a traceback, where it is a bad request."""
    web, servicer = served(tmp_path)
    deep = "[" * 5_000 + "]" * 5_000
    json_type = {"content-type": "application/json"}
    for path, body in (
        ("/translate", f'{{"q": {deep}, "source": "es", "target": "en"}}'),
        ("/detect", deep),
    ):
        answer = web.post(path, content=body, headers=json_type)
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json() == {"error": "Invalid JSON format"}
    answer = web.post("/v1/translate", data={"options": deep})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"].startswith("options: not JSON")
    # a text of brackets alone is a text
    answer = web.post("/v1/translate", data={"texts": "[" * 5_000})
    assert answer.status_code == 200 and list(servicer.requests[-1].texts) == ["[" * 5_000]


def test_the_document_lists_every_body_v1_reads(tmp_path):
    """/v1 reads a URL-encoded form as it reads a multipart one; the document listed only
    JSON and multipart bodies."""
    web, servicer = served(tmp_path)
    body = web.get("/openapi.json").json()["paths"]["/v1/translate"]["post"]["requestBody"]
    assert set(body["content"]) == {"application/json", "multipart/form-data", URL_ENCODED}
    answer = web.post("/v1/translate", content="texts=Hola.", headers={"content-type": URL_ENCODED})
    assert answer.status_code == 200 and list(servicer.requests[-1].texts) == ["Hola."]


def test_the_document_s_forms_have_their_files_and_path_parameters(tmp_path):
    """/v1's form bodies were documented as objects without fields, so a form made from the
    document (Swagger UI's) had no file to attach for a bytes field; each field is there,
    as the form is read, with the files and the path parameter LibreTranslate's calls take."""
    web, servicer = served(tmp_path)
    document = web.get("/openapi.json").json()
    paths = document["paths"]
    form = paths["/v1/translate"]["post"]["requestBody"]["content"]["multipart/form-data"]
    fields = form["schema"]["properties"]
    assert fields["utf8Texts"] == {"type": "array", "items": {"type": "string", "format": "binary"}}
    assert fields["texts"]["items"] == {"type": "string"}
    assert fields["options"]["type"] == "string"  # a message as JSON text
    answer = web.post(
        "/v1/translate",
        files={"utf8Texts": ("carta.txt", "¿Qué tal?".encode())},
        data={"options": '{"beamSize": 2}'},
    )
    assert answer.status_code == 200, answer.text
    assert list(servicer.requests[-1].utf8_texts) == ["¿Qué tal?".encode()]
    assert servicer.requests[-1].options.beam_size == 2
    (name,) = paths["/download_file/{name}"]["get"]["parameters"]
    assert (name["name"], name["in"], name["required"]) == ("name", "path", True)
    upload = document["components"]["schemas"]["LibreTranslate.FileRequest"]
    assert upload["properties"]["file"] == {"type": "string", "format": "binary"}
    pytest.importorskip("openapi_spec_validator").validate(document)


def test_a_url_encoded_form_is_documented_with_what_it_carries(tmp_path):
    """A URL-encoded form carries no file, and LibreTranslate reads one text from a form's q:
    the document gave a URL-encoded form a file to upload for a bytes field and q as a
    list. A bytes field is text, read as its UTF-8, and q one text, as the server reads
    them."""
    web, servicer = served(tmp_path)
    document = web.get("/openapi.json").json()
    paths, schemas = document["paths"], document["components"]["schemas"]
    form = paths["/v1/translate"]["post"]["requestBody"]["content"][URL_ENCODED]["schema"]
    utf8 = form["properties"]["utf8Texts"]["items"]
    assert utf8["type"] == "string" and "format" not in utf8
    form_type = {"content-type": URL_ENCODED}
    answer = web.post("/v1/translate", content="utf8Texts=%C2%BFQu%C3%A9", headers=form_type)
    assert answer.status_code == 200 and list(servicer.requests[-1].utf8_texts) == ["¿Qué".encode()]
    for path, name in (("/translate", "TranslateForm"), ("/detect", "DetectForm")):
        body = paths[path]["post"]["requestBody"]["content"][URL_ENCODED]["schema"]
        assert body == {"$ref": f"#/components/schemas/LibreTranslate.{name}"}
        assert schemas[f"LibreTranslate.{name}"]["properties"]["q"]["type"] == "string"
    sent = "q=Hola&q=amigo&source=es&target=en"
    assert web.post("/translate", content=sent, headers=form_type).json() == {
        "translatedText": "HOLA"
    }
    pytest.importorskip("openapi_spec_validator").validate(document)


@pytest.mark.parametrize("multipart", [False, True])
def test_a_libretranslate_form_is_read_as_libretranslate_reads_it(tmp_path, multipart):
    """LibreTranslate reads a form from Flask's `request.values`: a name's first value, the
    query's before the form's. The last value was read, the form's over the query's, so
    such a request was translated otherwise, or refused where LibreTranslate serves it."""
    web, servicer = served(tmp_path)
    fields = {"q": ["Hola", "amigo"], "source": "es", "target": ["en", "xx"]}
    files = {"unread": ("a.txt", b"-")} if multipart else None
    answer = web.post("/translate?target=en", data=fields | {"target": "xx"}, files=files)
    assert answer.json() == {"translatedText": "HOLA"}, answer.text
    answer = web.post("/translate", data=fields, files=files)
    assert answer.json() == {"translatedText": "HOLA"}, answer.text
    assert [list(r.texts) for r in servicer.requests] == [["Hola"], ["Hola"]]


def test_a_form_s_message_field_may_come_as_a_file_of_json(tmp_path):
    """A message-typed field sent as a file (`-F options=@options.json`, a glossary kept in
    a file) was read as a text and refused (no field named "{"); it is read as the JSON a
    field's text is. A file for a text field stays one text, though it starts with "["."""
    web, servicer = served(tmp_path)
    glossary = json.dumps([{"source": "perro", "target": "hound"}]).encode()
    answer = web.post(
        "/v1/translate",
        files=[
            ("texts", ("texto.txt", b'["uno", "dos"]')),
            ("options", ("options.json", b'{"beamSize": 2}')),
            ("glossary", ("glossary.json", glossary)),
        ],
    )
    assert answer.status_code == 200, answer.text
    request = servicer.requests[-1]
    assert list(request.texts) == ['["uno", "dos"]'] and request.options.beam_size == 2
    assert [(g.source, g.target) for g in request.glossary] == [("perro", "hound")]
    answer = web.post("/v1/translate", files={"options": ("o.json", b"{")}, data={"texts": "Hola"})
    assert answer.status_code == 400 and "options: not JSON" in answer.text


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        (
            "/v1/translate",
            {"texts": ["Hola"]},
            {"code": 500, "status": "INTERNAL", "message": "POST /v1/translate: internal error"},
        ),
        ("/translate", {"q": "Hola", "source": "es", "target": "en"}, "internal error"),
    ],
)
def test_a_fault_is_a_json_500_a_page_elsewhere_can_read(tmp_path, caplog, path, body, error):
    """A fault a route raised was Starlette's plain-text 500, sent outside the CORS
    middleware: a page on another origin saw its origin refused, not the error. It is
    each API's JSON error, with CORS's headers, its traceback logged."""
    web, servicer = served(tmp_path)

    async def fault(*args, **kwargs):
        raise RuntimeError("a fault of the servicer")

    servicer.unary = fault
    answer = web.post(path, json=body, headers={"origin": "https://elsewhere.example"})
    assert answer.status_code == 500 and answer.json() == {"error": error}
    assert answer.headers["access-control-allow-origin"] == "*"
    assert "a fault of the servicer" in caplog.text


# the URL a page's script calls: fetch("...") or call("...")
CALLED = re.compile(r"""\b(?:fetch|call)\(\s*["'`]([^"'`$]*)""")


def test_behind_a_proxy_at_the_root_path_the_page_and_every_link_reach_the_server(tmp_path):
    """A proxy that serves the API at /attnserve strips it before passing a request on: the
    redirects to the page and to /docs, the page's calls, the document's paths and a
    translated file's link went to the proxy's root, where nothing answers, and an unknown
    /v1 route was refused in LibreTranslate's shape. With `http_root_path` each reaches
    the server."""
    web, _ = served(tmp_path)
    config = ServerConfig(http_listen="127.0.0.1:0", http_root_path="/attnserve")

    async def through_proxy() -> None:
        server = http_app.HttpServer(web.app, config, reuse_port=False)
        await server.start()
        try:
            with PrefixProxy(server.port, "/attnserve") as proxy:
                async with httpx.AsyncClient(follow_redirects=True) as client:
                    await _served_under(client, proxy.url)
        finally:
            await server.stop()

    asyncio.run(through_proxy())


def test_a_path_that_still_carries_the_root_path_is_served_without_it(tmp_path):
    """Behind `http_root_path` a request whose path kept the root path (a proxy that passes it
    on unstripped, a client calling the server at a link the server wrote) was a 404: the
    redirects and translatedFileUrl that a client calling the server directly follows led
    nowhere. Such a path is served as the path without it, the stripped path as before."""
    web, _ = served(tmp_path)

    async def direct(client: httpx.AsyncClient, server: str) -> None:
        for path in ("/v1/models", "/attnserve/v1/models"):
            assert (await client.get(server + path)).json()["models"], path
        opened = await client.get(server + "/attnserve/")
        assert str(opened.url) == f"{server}/attnserve/page/index.html"
        assert opened.status_code == 200
        translated = await client.post(
            server + "/attnserve/translate_file",
            files={"file": ("carta.txt", b"Hola amigo.")},
            data={"source": "es", "target": "en"},
        )
        link = translated.json()["translatedFileUrl"]
        assert link.startswith(server + "/attnserve/download_file/")
        assert (await client.get(link)).content == b"HOLA AMIGO."
        unknown = await client.post(server + "/attnserve/v1/nothing", json={})
        assert unknown.json()["error"]["status"] == "NOT_FOUND"

    asyncio.run(_served_directly(web.app, "/attnserve", direct))


def test_a_stripped_path_that_starts_with_the_root_path_keeps_its_meaning(tmp_path):
    """Under the root path /v1 a proxy passes /v1/v1/health on as /v1/health: the contract's
    health, not LibreTranslate's /health; a path no route takes as it came loses the root."""
    web, _ = served(tmp_path)

    async def direct(client: httpx.AsyncClient, server: str) -> None:
        assert (await client.get(server + "/v1/health")).json() == {"status": "SERVING"}
        assert (await client.get(server + "/v1/v1/health")).json() == {"status": "SERVING"}
        assert (await client.get(server + "/health")).json() == {"status": "ok"}
        listed = (await client.get(server + "/v1/languages")).json()
        assert [language["code"] for language in listed] == ["en", "es"]

    asyncio.run(_served_directly(web.app, "/v1", direct))


async def _served_directly(app, root: str, calls) -> None:
    """`await calls(client, server)` against the app served by uvicorn under `root`, with no
    proxy before it (`server` is its address)."""
    config = ServerConfig(http_listen="127.0.0.1:0", http_root_path=root)
    server = http_app.HttpServer(app, config, reuse_port=False)
    await server.start()
    try:
        async with httpx.AsyncClient(follow_redirects=True) as client:
            await calls(client, f"http://127.0.0.1:{server.port}")
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("trusted", "scheme"),
    [
        ("127.0.0.1", "https"),
        ("10.0.0.0/8", "http"),
        (" * ", "https"),
        ("10.0.0.0/8, 127.0.0.5/8", "https"),
        ("", "http"),
    ],
)
def test_a_translated_file_s_link_is_https_behind_a_trusted_proxy_ending_tls(
    tmp_path, trusted, scheme
):
    """A proxy that ends TLS passes requests on over http with `X-Forwarded-Proto: https`:
    translatedFileUrl is https where the proxy's address is among `http_trusted_proxies`
    (a proxy on another host named there), http where it is not. The setting is read as
    its check reads it: white space around '*', a network written with host bits."""
    web, _ = served(tmp_path)
    config = ServerConfig(http_listen="127.0.0.1:0", http_trusted_proxies=trusted).validate()
    link = asyncio.run(_translated_link(web.app, config, "127.0.0.1"))
    assert link.startswith(f"{scheme}://127.0.0.1:")


@pytest.mark.parametrize(("listen", "proxy"), [("[::1]:0", "[::1]"), ("[::]:0", "127.0.0.1")])
def test_a_proxy_on_the_machine_is_trusted_over_ipv6_too(tmp_path, listen, proxy):
    """By default a proxy on the machine is believed whichever loopback it comes from: ::1,
    or 127.0.0.1 reaching an IPv6 listen address ([::]), where the socket sees it as
    ::ffff:127.0.0.1."""
    web, _ = served(tmp_path)
    config = ServerConfig(http_listen=listen).validate()
    assert asyncio.run(_translated_link(web.app, config, proxy)).startswith(f"https://{proxy}:")


async def _translated_link(app, config: ServerConfig, proxy: str) -> str:
    """translatedFileUrl of a file posted to a real server from `proxy`'s address, as a
    proxy ending TLS passes it on."""
    server = http_app.HttpServer(app, config, reuse_port=False)
    await server.start()
    try:
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                f"http://{proxy}:{server.port}/translate_file",
                files={"file": ("carta.txt", b"Hola amigo.")},
                data={"source": "es", "target": "en"},
                headers={"x-forwarded-proto": "https"},
            )
            return answer.json()["translatedFileUrl"]
    finally:
        await server.stop()


async def _served_under(client: httpx.AsyncClient, root: str) -> None:
    """Every page, script, call and link of the server at `root` (a proxy's prefix)."""

    async def reached(url: str, method: str = "GET") -> httpx.Response:
        answer = await client.request(method, url)
        # the server answers (a 404 of its own names the route: the page calls /v1/caption
        # where no captioner is served), not the proxy, whose 404 outside its prefix is empty
        assert url.startswith(root + "/") and answer.content, (url, answer.status_code)
        return answer

    for start, page in (("/", "index.html"), ("/docs", "docs.html")):
        opened = await reached(root + start)
        assert str(opened.url) == f"{root}/page/{page}" and opened.status_code == 200
        assets = re.findall(r'(?:href|src)="([^"#]+)"', opened.text)
        for asset in assets:
            text = (await reached(urljoin(str(opened.url), asset))).text
            for called in CALLED.findall(text) if asset.endswith(".js") else ():
                await reached(urljoin(str(opened.url), called))
    document = (await reached(root + "/openapi.json")).json()
    assert document["servers"] == [{"url": "/attnserve"}]
    origin = root.removesuffix("/attnserve")
    for path in document["paths"]:
        if "{" not in path:
            await reached(origin + document["servers"][0]["url"] + path)
    translated = await client.post(
        root + "/translate_file",
        files={"file": ("carta.txt", b"Hola amigo.")},
        data={"source": "es", "target": "en"},
    )
    link = translated.json()["translatedFileUrl"]
    assert (await reached(link)).content == b"HOLA AMIGO."
    unknown = await client.post(root + "/v1/nothing", json={})
    assert unknown.json()["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/translate", "api_key", {}),
        ("/translate", "api_key", 7),
        ("/detect", "api_key", ["a-key"]),
        ("/translate", "apiKey", False),
        ("/translate", "format", []),
        ("/translate", "format", 0),
        ("/translate", "alternatives", True),
        ("/translate", "alternatives", 2.5),
        ("/translate", "alternatives", {"n": 1}),
    ],
)
def test_a_libretranslate_field_of_the_wrong_type_is_a_bad_request(tmp_path, path, field, value):
    """A key, a format or a number of alternatives of a type LibreTranslate's API has no
    use for was read as absent or as a number (`"api_key": {}` served where keys are off,
    `"format": []` as text, `"alternatives": true` as 1), where the document says a text
    or an integer (schemathesis sent them)."""
    web, servicer = served(tmp_path)
    body = {"q": "Hola", "source": "es", "target": "en"} if path == "/translate" else {"q": "Hola"}
    answer = web.post(path, json=body | {field: value})
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]
    assert servicer.requests == []
    assert servicer.refusals == [(f"http/libretranslate/{path[1:]}", "INVALID_ARGUMENT")]


def test_a_libretranslate_field_sent_null_or_as_text_is_served_as_before(tmp_path):
    """Null is a field not sent (Mastodon sends `"api_key": null` where it has no key), and
    a number of alternatives may come as its text, as LibreTranslate reads it; the document
    says so (it said a key was text alone and alternatives at least 0, which are read as 0)."""
    web, servicer = served(tmp_path)
    schemas = web.get("/openapi.json").json()["components"]["schemas"]
    fields = schemas["LibreTranslate.TranslateRequest"]["properties"]
    assert "null" in fields["api_key"]["type"] and "null" in fields["format"]["type"]
    assert "minimum" not in fields["alternatives"] and "null" in fields["alternatives"]["type"]
    assert schemas["LibreTranslate.DetectRequest"]["properties"]["api_key"] == fields["api_key"]
    body = {"q": "Hola", "source": "es", "target": "en"}
    for extra in (
        {"api_key": None, "format": None, "alternatives": None},
        {"alternatives": "2"},
        {"alternatives": 2.0},
        {"alternatives": -1},
    ):
        answer = web.post("/translate", json=body | extra)
        assert answer.status_code == 200, (extra, answer.text)
    assert web.post("/detect", json={"q": "Hola", "api_key": None}).status_code == 200
    assert [r.options.num_hypotheses for r in servicer.requests] == [0, 3, 3, 0]


def test_with_keys_on_a_key_of_the_wrong_type_is_refused_as_no_key(tmp_path):
    """The type of every field is checked after the key, as the fields are."""
    tokens, refused = parse_tokens("a-token-of-sixteen-chars", "test"), []
    web, _ = served(tmp_path, tokens=tokens, refused=refused.append)
    body = {"q": "Hola", "source": "es", "target": "en", "alternatives": True}
    for key in ({}, 7):
        answer = web.post("/translate", json=body | {"api_key": key})
        assert answer.status_code in (400, 403) and "API key" in answer.json()["error"]
    known = body | {"api_key": "a-token-of-sixteen-chars"}
    assert web.post("/translate", json=known).json() == {
        "error": "Invalid request: alternatives parameter is not a number"
    }


@pytest.mark.parametrize("name", ["a" * 300 + ".txt", "é" * 200 + ".docx", "x." + "0" * 5000])
def test_a_download_named_longer_than_a_file_name_may_be_is_a_bad_request(tmp_path, name):
    """A name past the file system's 255 bytes made the lookup raise ENAMETOOLONG, answered
    500 (schemathesis sent one); it names no translated file, as any unknown name."""
    web, _ = served(tmp_path)
    file_posted(web, "carta.txt", b"Hola")  # the folder exists
    answer = web.get(f"/download_file/{name}")
    assert answer.status_code == 400 and answer.json() == {"error": "Invalid filename"}


def test_the_document_declares_the_deadline_health_and_models_as_served(tmp_path):
    """The document said X-Request-Timeout was any number (0 and below are refused) and
    gave /v1/health and /v1/models no answer's schema, /v1/health no `service` and no 404;
    each answer now validates against what the document declares for its status."""
    jsonschema = pytest.importorskip("jsonschema")
    web, _ = served(tmp_path)
    document = web.get("/openapi.json").json()
    header = document["paths"]["/v1/translate"]["post"]["parameters"][0]
    assert header["name"] == "x-request-timeout"
    assert header["schema"] == {"type": "number", "exclusiveMinimum": 0}
    zero = web.post("/v1/translate", json={"texts": ["Hola"]}, headers={header["name"]: "0"})
    assert zero.status_code == 400
    health = document["paths"]["/v1/health"]["get"]
    assert [p["name"] for p in health["parameters"]] == ["service"]
    for path, params in (
        ("/v1/health", {}),
        ("/v1/health", {"service": SERVICE}),
        ("/v1/health", {"service": "attnserve.v1.Nothing"}),
        ("/v1/models", {}),
    ):
        answer = web.get(path, params=params)
        declared = document["paths"][path]["get"]["responses"][str(answer.status_code)]
        schema = declared["content"]["application/json"]["schema"]
        jsonschema.validate(answer.json(), schema | {"components": document["components"]})
    assert web.get("/v1/health", params={"service": "attnserve.v1.Nothing"}).status_code == 404
