"""LibreTranslate's API, field for field as its clients send it (Mastodon, Weblate,
libretranslatepy, the npm `libretranslate` package): `POST /translate`, `POST /detect`,
`GET /languages`, `POST /translate_file` and `GET /download_file/...`, `GET
/frontend/settings`, `GET /health`. Bodies are JSON or forms (a name's first value read, the
query's before the form's, as LibreTranslate reads them); errors are `{"error": ...}` with
LibreTranslate's status codes (400 a bad request, 403 a bad key, 413 too large, 429
overloaded, 500 else).

A language pair goes to the served translator whose manifest declares it (the default
translator first). Languages are named by ISO 639-1 codes, as LibreTranslate names them
(NLLB's `spa_Latn` is `es`; the model's own code is taken too), read in any case, with an
alias or a region (`zh-Hans`, `pt-BR`). `source: auto` picks, among the languages served
towards the target and the target itself, the one the text is written in. As in
LibreTranslate, a text comes back as it is where there is nothing to translate: its source is
its target (a served language), or it has no letter or digit (blank, emoji, punctuation).
Every translation goes through TranslationService's own calls (admission, deadlines, drains,
the response cache, metrics under `http/libretranslate/...`); `/detect` is answered by the
front from the text's words, no model called, and counted as a call under
`http/libretranslate/detect`. An `api_key` is a bearer token:
with tokens off a key is ignored, as LibreTranslate ignores keys when they are off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

import grpc
from google.protobuf.json_format import MessageToDict
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from service.front.http.calls import (
    TOO_LARGE,
    URL_ENCODED,
    Aborted,
    HttpContext,
    TooLarge,
    authorize,
    bounded,
    header_token,
    timeout_of,
    until_disconnected,
    url_encoded,
    within,
)
from service.runtime import files, languages
from service.runtime.decoding import MAX_BEAM_SIZE
from service.runtime.requests import MAX_TEXTS
from service.wire.v1 import decoding_pb2, translation_pb2

log = logging.getLogger("attnserve")
# LibreTranslate's status for each gRPC status a call can end with (else 500)
STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 403,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
FRONTEND_TIMEOUT_MS = 500  # how long LibreTranslate's page waits after typing
MOST_ALTERNATIVES = MAX_BEAM_SIZE - 1  # alternatives beyond it are not searched for
KEEP_FILES_SECONDS = 1800.0  # a translated file waits this long for its download


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def refusal(aborted: Aborted) -> JSONResponse:
    status = STATUS.get(aborted.code, 500)
    prefix = "Slowdown: " if status == 429 else ""
    return error(status, prefix + aborted.details)


class Upload(NamedTuple):
    """A file of a form, read."""

    filename: str
    data: bytes


class BadRequest(Exception):
    """A request LibreTranslate answers 400 (or `status`), its message as LibreTranslate's;
    `code` is the gRPC status it is counted under (None: counted as a refused token)."""

    def __init__(self, message: str, status: int = 400, code=grpc.StatusCode.INVALID_ARGUMENT):
        super().__init__(message)
        self.status, self.code = status, code


STORED_NAME_BYTES = 200  # of a translated file's name as stored (a file system's limit: 255)


def _shortened(filename: str) -> str:
    """`filename` cut to STORED_NAME_BYTES of UTF-8 where longer, its suffix kept."""
    if len(filename.encode()) <= STORED_NAME_BYTES:
        return filename
    path = Path(filename)
    room = STORED_NAME_BYTES - len(path.suffix.encode())
    return path.stem.encode()[:room].decode(errors="ignore") + path.suffix


class LibreTranslateApi:
    def __init__(self, front, servicer, tokens, refused, files: Path, max_bytes: int):
        self.front, self.servicer = front, servicer
        self.tokens, self.refused, self.files = tokens, refused, files
        self.max_bytes = max_bytes

    def routes(self) -> list[Route]:
        return [
            Route("/translate", self.translate, methods=["POST"]),
            Route("/detect", self.detect, methods=["POST"]),
            Route("/languages", self.languages, methods=["GET", "POST"]),
            Route("/translate_file", self.translate_file, methods=["POST"]),
            Route("/download_file/{name}", self.download_file, methods=["GET"]),
            Route("/frontend/settings", self.settings, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/suggest", self.suggest, methods=["POST"]),
        ]

    # which model translates what
    def _pairs(self) -> dict[tuple[str, str], Pair]:
        """(source, target) as the edge names them -> the translator that serves the pair,
        with its own codes; the default translator first."""
        service = self.servicer.service
        names = self.front.models.get(service, {})
        default = self.front.defaults.get(service)
        pairs: dict[tuple[str, str], Pair] = {}
        for name in sorted(names, key=lambda n: (n != default, n)):
            for model in names[name].values():
                for source, target in model.languages.pairs():
                    edge = (languages.edge_code(source), languages.edge_code(target))
                    pairs.setdefault(edge, Pair(name, source, target))
        return pairs

    def _route(self, source: str, target: str, texts: list[str], text_format="plain") -> Routed:
        """Which model translates a request, from which source (an HTML text's detected by
        its text, not its markup); BadRequest as LibreTranslate says it. No model where the
        source is the target (the texts come back as they are)."""
        pairs = self._pairs()
        served = {code for pair in pairs for code in pair}
        own = sorted({code for pair in pairs.values() for code in pair[1:]})
        source, target = languages.edge_given(source, own), languages.edge_given(target, own)
        if target not in {t for _, t in pairs}:
            raise BadRequest(f"{target} is not supported")
        confidence = 100.0
        if source == "auto":
            among = sorted({s for s, t in pairs if t == target} | {target})
            sample = languages.sample(texts, text_format)
            source, confidence = _best(languages.detect(sample, among), target)
        elif source not in served:
            raise BadRequest(f"{source} is not supported")
        if source == target:
            return Routed(None, source, confidence)
        if (source, target) not in pairs:
            raise BadRequest(
                f"{languages.name(target)} ({target}) is not available as a target language "
                f"from {languages.name(source)} ({source})"
            )
        return Routed(pairs[source, target], source, confidence)

    # the calls
    async def _values(self, request: Request) -> tuple[dict, bool]:
        """The call's fields (a JSON body's, or the query's and a form's, an uploaded file
        read as Upload and the form closed), and whether they came as a form."""
        try:
            return await self._read(bounded(request, self.max_bytes))
        except HTTPException as error:  # a form Starlette cannot read
            raise BadRequest(error.detail, error.status_code) from None
        except TooLarge:  # a length said, or counted as the body came
            raise BadRequest(
                f"Request too large: at most {self.max_bytes} bytes", TOO_LARGE
            ) from None

    async def _read(self, request: Request) -> tuple[dict, bool]:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            raise TooLarge
        if content_type == "application/json" or _json_suffix(content_type):
            body = await request.body()
            try:  # nested past Python's recursion limit: RecursionError
                values = json.loads(body or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                raise BadRequest("Invalid JSON format") from None
            if not isinstance(values, dict):
                raise BadRequest("Invalid JSON format")
            try:  # a "\ud800" escape reads as a string that has no UTF-8
                json.dumps(values, ensure_ascii=False).encode()
            except RecursionError:
                raise BadRequest("Invalid JSON format") from None
            except UnicodeEncodeError:
                raise BadRequest(
                    "Invalid request: an unpaired surrogate in the JSON body"
                ) from None
            return values, False
        # as LibreTranslate reads `request.values`: a name's first value, the query's first
        values: dict = {}
        _first_of(values, request.query_params.multi_items())
        if content_type == URL_ENCODED:
            form = url_encoded(await request.body(), request.headers["content-type"])
            _first_of(values, form.multi_items())
            return values, True
        form = content_type == "multipart/form-data"
        if form:
            async with request.form(max_part_size=self.max_bytes) as fields:
                for key, value in fields.multi_items():
                    if key in values:
                        continue
                    if isinstance(value, UploadFile):
                        value = Upload(value.filename or "", await value.read())
                    values[key] = value
        return values, form

    def _authorize(self, request: Request, values: dict) -> None:
        """Refuses a call without a known key before its fields are checked, as
        LibreTranslate's access check and gRPC's interceptor do."""
        if not self.tokens:
            return
        # api_key as LibreTranslate reads it; apiKey as its npm client sends it
        key = values.get("api_key") or values.get("apiKey") or header_token(request)
        if not key:  # refused for its token as a call without one over gRPC or /v1 is
            self.refused(grpc.StatusCode.UNAUTHENTICATED)
            raise BadRequest("Please contact the server operator to get an API key", code=None)
        try:
            authorize(self.tokens, str(key), self.servicer.service, self.refused)
        except Aborted as aborted:
            reason = "Invalid API key" if aborted.code == grpc.StatusCode.UNAUTHENTICATED else ""
            raise BadRequest(reason or aborted.details, 403, None) from None

    async def _call(
        self, request: Request, message, label: str, context: HttpContext, counted=True
    ):
        """Translate over the servicer within the request's deadline (`context`); without
        `counted`, one part of a request the caller counts whole (`_counted`)."""
        label = f"http/libretranslate/{label}"
        call = self.servicer.unary("Translate", message, context, label, counted)
        return await until_disconnected(request, within(context, call))

    def _counted(self, label: str, code, received: float, model: str = "") -> None:
        """Counts a request as the servicer counts a call: one that made no call, or whose
        calls were not counted, under `model` (by default the one a call naming none gets)."""
        self.servicer.counted_at_edge(f"http/libretranslate/{label}", code, received, model)

    def _refused(self, label: str, bad: BadRequest, received: float) -> JSONResponse:
        """LibreTranslate's answer to a request refused before its call, counted as the
        servicer counts a call (a refused token is counted as such by `authorize`)."""
        if bad.code is not None:
            self._counted(label, bad.code, received)
        return error(bad.status, str(bad))

    async def translate(self, request: Request) -> Response:
        received = time.monotonic()
        try:
            values, form = await self._values(request)
            self._authorize(request, values)
            _check_types(values)
            context = _context(request, received)
            q, source, target = values.get("q"), _field(values, "source"), _field(values, "target")
            for name, value in (("q", q), ("source", source), ("target", target)):
                if not value:
                    raise BadRequest(f"Invalid request: missing {name} parameter")
            try:
                alternatives = max(0, int(values.get("alternatives") or 0))
            except (TypeError, ValueError, OverflowError):  # 1e400 reads as infinity
                raise BadRequest(
                    "Invalid request: alternatives parameter is not a number"
                ) from None
            text_format = values.get("format") or "text"
            if text_format not in ("text", "html"):
                raise BadRequest(f"{text_format} format is not supported")
            batch = isinstance(q, list)
            texts = q if batch else [q]
            if not all(isinstance(t, str) for t in texts):
                raise BadRequest("Invalid request: q must be a string or a list of strings")
            if form:  # LibreTranslate counts a form's line breaks as one character
                texts = ["\n".join(t.splitlines()) for t in texts]
            route, translated, others = await self._translated(
                request, context, texts, source, target, text_format, alternatives
            )
        except BadRequest as bad:
            return self._refused("translate", bad, received)
        except Aborted as aborted:
            return refusal(aborted)
        if route.pair is None:  # sent back as it is, no call made
            self._counted("translate", grpc.StatusCode.OK, received)
        result: dict = {"translatedText": translated if batch else translated[0]}
        if source.lower() == "auto":
            found = {"confidence": route.confidence, "language": route.source}
            result["detectedLanguage"] = [found] * len(texts) if batch else found
        if alternatives:
            result["alternatives"] = others if batch else others[0]
        return JSONResponse(result)

    async def _translated(self, request, context, texts, source, target, text_format, alternatives):
        """-> (its route, each text's translation, each text's alternatives); a text with
        nothing to translate, or all where the source is the target, as it is."""
        translated, others = list(texts), [[] for _ in texts]
        wanted = [i for i, text in enumerate(texts) if _translatable(text)]
        if wanted:
            route = self._route(source, target, [texts[i] for i in wanted], text_format)
        else:  # nothing to translate, the pair checked all the same
            auto = source.lower() == "auto"
            route = self._route(target if auto else source, target, texts, text_format)
            route = Routed(None, route.source, 0.0 if auto else 100.0)
        if route.pair is None:
            return route, translated, others
        pair = route.pair
        message = _translate_message(
            pair.model, [texts[i] for i in wanted], text_format, alternatives
        )
        message.source_language, message.target_language = pair.source, pair.target
        response = await self._call(request, message, "translate", context)
        for i, translation in zip(wanted, response.translations, strict=True):
            best, *rest = [h.text for h in translation.hypotheses]
            translated[i] = best
            others[i] = list(dict.fromkeys(t for t in rest if t != best))
        return route, translated, others

    async def detect(self, request: Request) -> Response:
        received = time.monotonic()
        try:
            values, _ = await self._values(request)
            self._authorize(request, values)
            _check_types(values)
            q = values.get("q")
            if not q:
                raise BadRequest("Invalid request: missing q parameter")
            texts = q if isinstance(q, list) else [q]
            if not all(isinstance(t, str) for t in texts):
                raise BadRequest("Invalid request: q must be a string or a list of strings")
        except BadRequest as bad:
            return self._refused("detect", bad, received)
        text = " ".join(texts)
        among = sorted({code for pair in self._pairs() for code in pair})
        ranked = languages.detect(text, among)
        self._counted("detect", grpc.StatusCode.OK, received)
        return JSONResponse(
            [{"confidence": round(p * 100, 1), "language": code} for code, p in ranked]
        )

    async def languages(self, request: Request) -> Response:
        pairs = self._pairs()
        codes = sorted({code for pair in pairs for code in pair})
        return JSONResponse(
            [
                {
                    "code": code,
                    "name": languages.name(code),
                    "targets": sorted(t for s, t in pairs if s == code),
                }
                for code in codes
            ]
        )

    async def translate_file(self, request: Request) -> Response:
        """A file translated whole, in calls of at most MAX_TEXTS paragraphs, counted as one
        request under the model that translated it."""
        received, model = time.monotonic(), ""
        try:
            values, _ = await self._values(request)
            self._authorize(request, values)
            _check_types(values)
            context = _context(request, received)  # one deadline for every batch
            upload = values.get("file")
            source, target = _field(values, "source"), _field(values, "target")
            if not isinstance(upload, Upload):
                raise BadRequest("Invalid request: missing file parameter")
            for name, value in (("source", source), ("target", target)):
                if not value:
                    raise BadRequest(f"Invalid request: missing {name} parameter")
            filename = Path(upload.filename or "").name
            if not filename:
                raise BadRequest("Invalid request: empty file")
            suffix = Path(filename).suffix.lower()
            if suffix not in files.FORMATS:
                raise BadRequest("Invalid request: file format not supported")
            try:
                # unpacking and parsing take the front's loop no longer than a thread switch
                piece = min(files.HTML_PIECE, self.front.config.max_text_chars)
                document = await asyncio.to_thread(files.read_file, suffix, upload.data, piece)
            except (ValueError, UnicodeDecodeError) as bad:
                raise BadRequest(f"Invalid request: {filename}: {bad}") from None
            texts = [p.text for p in document.paragraphs]
            pair = self._route(source, target, texts, document.text_format).pair
            model = pair.model if pair is not None else ""
            for batch in document.batches(MAX_TEXTS) if pair is not None else ():
                message = _translate_message(pair.model, batch.texts, document.text_format, 0)
                message.source_language, message.target_language = pair.source, pair.target
                message.options.return_alignment = batch.aligned
                response = await self._call(request, message, "translate_file", context, False)
                batch.write([MessageToDict(t) for t in response.translations])
            if pair is not None:  # the translation says its language where the file can
                document.declare(pair.source, pair.target)
        except BadRequest as bad:
            return self._refused("translate_file", bad, received)
        except Aborted as aborted:  # by a call
            self._counted("translate_file", aborted.code, received, model)
            return refusal(aborted)
        stored = f"{uuid.uuid4()}.{_shortened(filename)}"
        self.files.mkdir(parents=True, exist_ok=True)
        forget_old(self.files, KEEP_FILES_SECONDS)
        try:
            (self.files / stored).write_bytes(await asyncio.to_thread(document.save))
        except Exception as failed:  # a library's, writing the document back: LibreTranslate's
            log.exception("translate_file: %s", filename)
            self._counted("translate_file", grpc.StatusCode.INTERNAL, received, model)
            return error(500, f"Cannot translate file: {type(failed).__name__}")
        self._counted("translate_file", grpc.StatusCode.OK, received, model)
        # the name as one path segment: a "#" or "?" in it would end the path
        url = str(request.url_for("download_file", name=quote(stored, safe="")))
        return JSONResponse({"translatedFileUrl": url})

    async def download_file(self, request: Request) -> Response:
        stored = request.path_params["name"]
        path = self.files / stored
        if Path(stored).name != stored or "." not in stored or not _is_file(path):
            return error(400, "Invalid filename")
        try:  # past its time it is gone, though no later upload has swept the folder yet
            expired = path.stat().st_mtime < time.time() - KEEP_FILES_SECONDS
            if expired:
                path.unlink()
        except FileNotFoundError:  # another front deleted it first
            expired = True
        if expired:
            return error(400, "Invalid filename")
        return FileResponse(path, filename=stored.partition(".")[2])

    async def settings(self, request: Request) -> Response:
        pairs = self._pairs()
        target = sorted({t for _, t in pairs})
        first = target[0] if target else "en"
        return JSONResponse(
            {
                "charLimit": self.front.config.max_text_chars,
                "frontendTimeout": FRONTEND_TIMEOUT_MS,
                "apiKeys": bool(self.tokens),
                "keyRequired": bool(self.tokens),
                "suggestions": False,
                "filesTranslation": True,
                "supportedFilesFormat": list(files.FORMATS),
                "language": {
                    "source": {"code": "auto", "name": "Auto Detect"},
                    "target": {"code": first, "name": languages.name(first)},
                },
            }
        )

    async def health(self, request: Request) -> Response:
        if self.front.healthy:
            return JSONResponse({"status": "ok"})
        return error(503, "not serving: warming up, no worker ready, or draining")

    async def suggest(self, request: Request) -> Response:
        """Suggestions are off (`/frontend/settings` says so), in LibreTranslate's words."""
        return error(403, "Suggestions are disabled on this server.")


def _is_file(path: Path) -> bool:
    """Whether `path` is a file; a name the file system refuses to look up (longer than it
    takes: ENAMETOOLONG, which `Path.is_file` raises) names none."""
    try:
        return path.is_file()
    except OSError:
        return False


def forget_old(folder: Path, seconds: float) -> int:
    """Deletes the translated files of `folder` older than `seconds`; how many it deleted."""
    oldest, deleted = time.time() - seconds, 0
    for path in folder.iterdir():
        try:
            if path.is_file() and path.stat().st_mtime < oldest:
                path.unlink()
                deleted += 1
        except FileNotFoundError:  # another front deleted it first
            continue
    return deleted


class Pair(NamedTuple):
    """The translator of a language pair, and the pair as its manifest names it."""

    model: str
    source: str
    target: str


class Routed(NamedTuple):
    """Which model translates a request (None: the texts come back as they are), from which
    source (as the edge names it), and how sure the detection was of it (%)."""

    pair: Pair | None
    source: str
    confidence: float


def _context(request: Request, received: float) -> HttpContext:
    """The call's deadline from its X-Request-Timeout header, from when it was `received`;
    BadRequest where it is bad. Read after its key is checked, as /v1 and gRPC check the
    token first."""
    try:
        return HttpContext(timeout_of(request), received)
    except Aborted as aborted:
        raise BadRequest(aborted.details) from None


def _first_of(values: dict, items) -> None:
    """Adds each (name, value) of `items` whose name `values` lacks."""
    for key, value in items:
        values.setdefault(key, value)


# fields that are text where sent (null: not sent, as Mastodon sends a key it has not set)
TEXT_FIELDS = ("api_key", "apiKey", "format")


def _check_types(values: dict) -> None:
    """BadRequest for a field of a type LibreTranslate's API has no use for (checked after
    the key, as every field is): a key or a format that is not text, a number of
    alternatives that is not a whole number or its text (as a form sends it). Such a field
    was read as absent (`"api_key": {}` served where keys are off, `"format": []` as text)
    or as a number (`"alternatives": true` as 1)."""
    for name in TEXT_FIELDS:
        if values.get(name) is not None and not isinstance(values[name], str):
            raise BadRequest(f"Invalid request: {name} parameter must be a string")
    alternatives = values.get("alternatives")
    if alternatives is not None and (
        isinstance(alternatives, bool)
        or not isinstance(alternatives, int | float | str)
        or (isinstance(alternatives, float) and not alternatives.is_integer())
    ):
        raise BadRequest("Invalid request: alternatives parameter is not a number")


def _field(values: dict, name: str) -> str:
    value = values.get(name)
    return str(value).strip() if value else ""


def _json_suffix(content_type: str) -> bool:
    """A JSON media type by its structured suffix (application/vnd.api+json)."""
    return content_type.startswith("application/") and content_type.endswith("+json")


def _translatable(text: str) -> bool:
    """Whether a text has anything to translate: a letter or a digit (else it comes back as
    it is, as LibreTranslate sends back a text of emoji alone)."""
    return any(c.isalnum() for c in text)


def _best(ranked: list[tuple[str, float]], target: str) -> tuple[str, float]:
    """The detected source: the most likely; where the target ties with another (a text
    too short to tell, "Hola" as much English as Spanish), the other, so that the text is
    translated rather than sent back as it is."""
    if not ranked:
        raise BadRequest("auto is not supported: no source language is served")
    code, probability = ranked[0]
    tied = [c for c, p in ranked if p == probability and c != target]
    if code == target and tied:
        code = tied[0]
    return code, round(probability * 100, 1)


def _translate_message(name: str, texts: list[str], text_format: str, alternatives: int):
    message = translation_pb2.TranslateRequest(model=name, texts=texts)
    if text_format == "html":
        message.text_format = translation_pb2.TEXT_FORMAT_HTML
    if alternatives:
        wanted = min(alternatives, MOST_ALTERNATIVES) + 1
        message.options.CopyFrom(
            decoding_pb2.DecodingOptions(beam_size=max(4, wanted), num_hypotheses=wanted)
        )
    return message
